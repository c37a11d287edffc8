"""The soak summary of ``gpudoctor monitor --summary``: of this run (read back from its --log, or
from the samplers' buffers) or of a finished log (``monitor --summary LOGFILE``). The numbers are
:func:`gpudoctor.analysis.soak.summarize_soak`'s; the words :func:`gpudoctor.report.soak_view.render_soak`'s.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from gpudoctor.cli.output import fail, stderr_console


def _summary_out(gpu_samples, host_samples, json_output: bool, note: str = "") -> str:
    """Print the soak summary (a JSON line with --json); return its verdict."""
    from gpudoctor.analysis.soak import summarize_soak
    from gpudoctor.cli.output import stdout_console
    from gpudoctor.records.base import to_dict
    from gpudoctor.report.soak_view import render_soak

    result = summarize_soak(gpu_samples, host_samples)
    if json_output:
        sys.stdout.write(json.dumps({"summary": to_dict(result)}, allow_nan=False) + "\n")
        sys.stdout.flush()
    else:
        console = stdout_console()
        console.print()
        console.print(render_soak(result))
    if note:
        stderr_console().print(f"[yellow]note:[/] {note}", highlight=False)
    return result.verdict


def summarise_run(sink, gpu, host, started: float, json_output: bool) -> str:
    """The summary of this run: read back from the log when there is one (every row of this run,
    however long), else from the samplers' buffers."""
    if sink is not None:
        from gpudoctor.collectors.sample_log import read_gpu_log, read_host_log

        gpu_rows = [s for s in read_gpu_log(sink.path) if s.timestamp_s >= started]
        host_rows = ([h for h in read_host_log(sink.host_path) if h.timestamp_s >= started]
                     if sink.host_path.exists() else [])
        return _summary_out(gpu_rows, host_rows, json_output)
    samples = gpu.samples()
    full = any(len(gpu.history(i, gpu.maxlen)) >= gpu.maxlen for i in gpu.latest())
    note = (f"the summary covers the last {gpu.maxlen} samples of each GPU; use --log for a "
            "longer soak") if full else ""
    return _summary_out(samples, host.samples(), json_output, note)


def summarise_log(path: Path, json_output: bool) -> int:
    """``monitor --summary LOGFILE``: the exit code (1 when a GPU ran unstable)."""
    from gpudoctor.collectors.sample_log import host_log_path, read_gpu_log, read_host_log
    from gpudoctor.records.base import SchemaError

    from gpudoctor.records.rundir import GPU_SAMPLES, HOST_SAMPLES

    if path.is_dir() and (path / GPU_SAMPLES).is_file():  # a `gpudoctor run` directory
        path = path / GPU_SAMPLES
    if not path.is_file():
        fail(f"{path}: no such log; write one with gpudoctor monitor --log {path}")
    host_path = host_log_path(path)
    if path.name == GPU_SAMPLES and not host_path.is_file():
        host_path = path.with_name(HOST_SAMPLES)  # a run directory's host samples
    try:
        gpu_rows = read_gpu_log(path)
        host_rows = read_host_log(host_path) if host_path.is_file() else []
    except (SchemaError, ValueError, OSError) as exc:
        fail(f"{path}: cannot read it as a monitor log ({exc})")
    if not gpu_rows and not host_rows:
        fail(f"{path}: the log holds no sample")
    return 1 if _summary_out(gpu_rows, host_rows, json_output) == "unstable" else 0


__all__ = ["summarise_log", "summarise_run"]
