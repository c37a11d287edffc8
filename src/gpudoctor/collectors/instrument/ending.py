"""The end of a probed run: write what was gathered (steps, config, window), and the stop.

Reached from ``atexit`` (the script ended or raised), from SIGTERM (torchrun stopping its
workers, a scheduler's kill) and from the ``--steps`` stop inside the optimizer step hook.
"""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path
from typing import Any

from gpudoctor.collectors.instrument.probes import _apply, _set
from gpudoctor.collectors.instrument.state import S, is_owner
from gpudoctor.collectors.instrument.stepfile import flush_ready
from gpudoctor.records.base import write_json
from gpudoctor.records.rundir import KIND_CONFIG, KIND_WINDOW, config_file, window_file


def install_sigterm() -> None:
    """On SIGTERM (torchrun stopping its workers, a scheduler's kill), flush first."""
    try:
        if signal.getsignal(signal.SIGTERM) not in (signal.SIG_DFL, None):
            return  # the script has its own handler: leave it alone
        signal.signal(signal.SIGTERM, _on_sigterm)
    except (ValueError, OSError):  # not the main thread
        pass


def _on_sigterm(signum: int, frame: Any) -> None:
    finish("signal")
    signal.signal(signum, signal.SIG_DFL)
    os.kill(os.getpid(), signum)


def write_window() -> None:
    if S.profiler is None or S.run_dir is None:
        return
    window, S.profiler = S.profiler, None
    if not window.stopped:
        window.stop(last_step=S.step - 1)
    trace = S.run_dir / f"trace-rank{S.rank}.json" if S.keep_trace else None
    summary = window.summarize(trace_path=trace)
    note = S.seen.window_note
    if S.seen.trace_dir and window.profiler is not None:  # --trace-dir
        from gpudoctor.collectors.trace_export import export_trace_dir

        written = export_trace_dir(window.profiler, Path(S.seen.trace_dir), S.rank)
        note = "; ".join(n for n in (note, "" if isinstance(written, Path) else written) if n)
    if summary is not None and note:
        import dataclasses

        summary = dataclasses.replace(summary, note="; ".join(n for n in (summary.note, note) if n))
    if summary is not None:
        write_json(S.run_dir / window_file(S.rank), summary, kind=KIND_WINDOW)


# ---- configuration and the end ---------------------------------------------------------------


def write_config() -> None:
    """Write ``config-rank{N}.json`` from what the probes have seen so far."""
    if S.run_dir is None:
        return
    from gpudoctor.collectors.instrument import rankconfig

    try:
        config = rankconfig.capture(S)
    except Exception as exc:  # noqa: BLE001 - a config we cannot read must not stop training
        print(f"gpudoctor: could not read the training configuration: {exc}", file=sys.stderr)
        return
    write_json(S.run_dir / config_file(S.rank), config, kind=KIND_CONFIG)
    S.config = config


def finish(reason: str) -> None:
    """Write everything gathered: pending steps (waiting for the GPU once), config, window."""
    if not S.installed or S.finished or not is_owner():
        return
    S.finished = True
    S.quiet = True
    try:
        if S.step == 0 and not S.seen.first_step_done:
            write_window()
            return
        try:
            import torch

            if S.timer is not None and torch.cuda.is_initialized():
                for tag, ms in S.timer.elapsed_ms(sync=True):  # sync point: the run is over
                    _set(tag, "gpu_ms", ms)
            _apply(S.lazy.poll(wait=True))  # sync point: the run is over
        except Exception:  # noqa: BLE001 - a dead CUDA context must not lose the records
            pass
        flush_ready(final=True)
        if S.writer is not None:
            S.writer.close()
        write_config()
        write_window()
    except Exception as exc:  # noqa: BLE001
        print(f"gpudoctor: could not write all records ({type(exc).__name__}: {exc})", file=sys.stderr)


def stop() -> None:
    """The ``--steps`` stop: write everything, end loader workers, leave with exit code 0."""
    finish("steps")
    if S.rank == 0:
        print(
            f"gpudoctor: stopping the script after {S.step} optimizer steps (--steps {S.steps_limit}); "
            "use --full to run it to the end",
            file=sys.stderr,
        )
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:  # noqa: BLE001
            pass
    try:  # DataLoader workers would linger until their watchdog notices: end them now
        import multiprocessing

        for child in multiprocessing.active_children():
            child.terminate()
    except Exception:  # noqa: BLE001
        pass
    os._exit(0)
