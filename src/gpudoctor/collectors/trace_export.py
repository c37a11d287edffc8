"""The profiler window's trace where people open traces: TensorBoard, Perfetto, Holistic Trace Analysis.

``gpudoctor run --trace-dir DIR`` (and ``gpudoctor.watch(trace_dir=DIR)``) write each rank's
window as ``DIR/<host>_rank<N>.<ms>.pt.trace.json.gz`` — the layout
``torch.profiler.tensorboard_trace_handler`` writes, so ``tensorboard --logdir DIR`` (profiler
plugin), ``ui.perfetto.dev`` (open the file) and ``hta.TraceAnalysis(trace_dir=DIR)`` read it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

TRACE_SUFFIX = ".pt.trace.json.gz"


def trace_worker_name(rank: int) -> str:
    """The worker name of a trace file: ``<host>_rank<N>`` (the host name and the rank, as
    TensorBoard's profiler plugin and Holistic Trace Analysis list the workers)."""
    import socket

    return f"{socket.gethostname()}_rank{rank}"


def export_trace_dir(prof: Any, folder: Path, rank: int) -> Path | str:
    """Write ``prof``'s trace as ``folder/<host>_rank<N>.<ms>.pt.trace.json.gz``: the layout of
    ``torch.profiler.tensorboard_trace_handler`` (one file per rank), which TensorBoard's profiler
    plugin, Perfetto and Holistic Trace Analysis open. Returns the file, or why it was not written."""
    try:
        from torch.profiler import tensorboard_trace_handler

        folder.mkdir(parents=True, exist_ok=True)
        worker = trace_worker_name(rank)
        before = set(folder.glob(f"{worker}.*{TRACE_SUFFIX}"))
        tensorboard_trace_handler(str(folder), worker_name=worker, use_gzip=True)(prof)
        new = sorted(set(folder.glob(f"{worker}.*{TRACE_SUFFIX}")) - before)
    except Exception as exc:  # noqa: BLE001 - a trace is extra evidence, never a reason to fail
        return f"trace folder not written: {exc}"
    return new[-1] if new else "trace folder not written: no file appeared"


__all__ = ["TRACE_SUFFIX", "export_trace_dir", "trace_worker_name"]
