"""Step scalars where training dashboards look: a CSV file, and TensorBoard when it is installed.

One row per optimizer step and rank: step time, data wait, throughput, loss, allocator memory and
GPU utilisation. Written by the engine's :class:`~gpudoctor.train.scalars.ScalarsObserver` while
it trains, and by ``gpudoctor run --scalars DIR`` from the run directory once the run has ended
(:func:`export_run`).

Layout of ``DIR``::

    scalars-rank{N}.csv      the columns of :data:`COLUMNS`; empty cell: not measured
    rank{N}/events.out.tfevents.*   TensorBoard scalars ``gpudoctor/<column>`` by step
                                    (only when ``tensorboard`` is importable)

``tensorboard --logdir DIR`` shows every rank as its own run. The files are never overwritten: a
folder that already holds ``scalars-rank{N}.csv`` is refused.
"""

from __future__ import annotations

import csv
import math
from pathlib import Path
from typing import Any

from gpudoctor.errors import GpuDoctorUserError
from gpudoctor.records.gpu import GpuSample
from gpudoctor.records.step import StepRecord
from gpudoctor.records.units import MIB

COLUMNS = (
    "step",
    "t_end_s",
    "step_ms",
    "data_wait_ms",
    "gpu_ms",
    "samples_per_s",
    "tokens_per_s",
    "loss",
    "mem_allocated_mib",
    "mem_reserved_mib",
    "mem_peak_allocated_mib",
    "gpu_util_pct",
)
TAG_PREFIX = "gpudoctor/"


def csv_name(rank: int) -> str:
    return f"scalars-rank{rank}.csv"


def scalars_of(record: StepRecord, gpu_util_pct: float | None = None) -> dict[str, float | int | None]:
    """One step's scalars (``None``: not measured in this step)."""
    seconds = record.step_ms / 1000.0 if record.step_ms and record.step_ms > 0 else None
    mem = record.mem
    return {
        "step": record.step,
        "t_end_s": record.t_end_s,
        "step_ms": record.step_ms,
        "data_wait_ms": record.data_wait_ms,
        "gpu_ms": record.gpu_ms,
        "samples_per_s": record.samples / seconds if record.samples and seconds else None,
        "tokens_per_s": record.tokens / seconds if record.tokens and seconds else None,
        "loss": record.loss,
        "mem_allocated_mib": mem.allocated_bytes / MIB if mem is not None else None,
        "mem_reserved_mib": mem.reserved_bytes / MIB if mem is not None else None,
        "mem_peak_allocated_mib": mem.peak_allocated_bytes / MIB if mem is not None else None,
        "gpu_util_pct": gpu_util_pct,
    }


def tensorboard_writer_class() -> Any:
    """``torch.utils.tensorboard.SummaryWriter`` when tensorboard is installed, else ``None``."""
    try:
        from torch.utils.tensorboard import SummaryWriter
    except ImportError:  # tensorboard is optional: pip install tensorboard
        return None
    return SummaryWriter


class ScalarWriter:
    """Write one rank's step scalars to ``DIR/scalars-rank{N}.csv`` and, if possible, TensorBoard.

    Args:
        folder: the scalars folder (created).
        rank: the rank whose steps these are.
        tensorboard: ``None``: when tensorboard is importable; ``False``: CSV only.
    """

    def __init__(self, folder: Path, rank: int, *, tensorboard: bool | None = None) -> None:
        self.folder = Path(folder)
        self.rank = rank
        path = self.folder / csv_name(rank)
        if path.exists():
            raise GpuDoctorUserError(f"--scalars {self.folder}: {path.name} already exists; give a new folder "
                                     "(gpudoctor does not overwrite it)")
        self.folder.mkdir(parents=True, exist_ok=True)
        self.csv_path = path
        self._fh = path.open("x", newline="", encoding="utf-8")
        self._csv = csv.writer(self._fh)
        self._csv.writerow(COLUMNS)
        self.tensorboard_note = ""
        self._tb: Any = None
        cls = tensorboard_writer_class() if tensorboard is not False else None
        if cls is not None:
            self._tb = cls(log_dir=str(self.folder / f"rank{rank}"))
        elif tensorboard is None:
            self.tensorboard_note = "TensorBoard scalars not written: tensorboard is not installed (pip install tensorboard)"

    @property
    def tensorboard(self) -> bool:
        return self._tb is not None

    def write(self, record: StepRecord, gpu_util_pct: float | None = None) -> None:
        values = scalars_of(record, gpu_util_pct)
        self._csv.writerow(["" if values[c] is None else values[c] for c in COLUMNS])
        self._fh.flush()
        if self._tb is not None:
            for name, value in values.items():
                if name not in ("step", "t_end_s") and value is not None and math.isfinite(value):
                    self._tb.add_scalar(TAG_PREFIX + name, value, global_step=record.step,
                                        walltime=record.t_end_s)

    def close(self) -> None:
        if self._fh.closed:
            return
        self._fh.close()
        if self._tb is not None:
            self._tb.close()


def gpu_util_at(samples: list[GpuSample], index: int | None, t_s: float) -> float | None:
    """The utilisation of GPU ``index`` in the last sample at or before ``t_s`` (``samples`` in
    time order); ``None`` without one."""
    if index is None:
        return None
    found = None
    for sample in samples:
        if sample.index != index:
            continue
        if sample.timestamp_s > t_s:
            break
        found = sample.util_gpu_pct
    return found


def gpu_index_of(config: Any, samples: list[GpuSample]) -> int | None:
    """The NVML index of the GPU a rank trained on: the one whose processes list the rank's pid;
    else its CUDA index when no ``CUDA_VISIBLE_DEVICES`` renumbers the devices; else ``None``."""
    if config is None or config.cuda_device_index is None:
        return None
    for sample in samples:
        if any(p.pid == config.pid for p in sample.processes):
            return sample.index
    return config.cuda_device_index if config.cuda_visible_devices in (None, "") else None


def export_run(run: Any, folder: Path, *, tensorboard: bool | None = None) -> tuple[list[Path], str]:
    """Write every rank's steps of a loaded run directory (:class:`~gpudoctor.records.rundir.RunData`);
    return the CSV files and a note (empty, or why TensorBoard was left out)."""
    written, note = [], ""
    samples = sorted(run.gpu, key=lambda s: s.timestamp_s)
    for rank in sorted(run.steps):
        index = gpu_index_of(run.configs.get(rank), samples)
        writer = ScalarWriter(folder, rank, tensorboard=tensorboard)
        try:
            for record in run.steps[rank]:
                writer.write(record, gpu_util_at(samples, index, record.t_end_s))
        finally:
            writer.close()
        written.append(writer.csv_path)
        note = writer.tensorboard_note
    return written, note


__all__ = ["COLUMNS", "ScalarWriter", "csv_name", "export_run", "gpu_index_of", "gpu_util_at", "scalars_of"]
