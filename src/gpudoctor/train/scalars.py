"""The engine's step scalars for dashboards: an :class:`~gpudoctor.train.events.Observer`.

``Trainer(..., observers=[ScalarsObserver("runs/exp1")])`` writes each rank's step time, data
wait, throughput, loss, allocator memory and GPU utilisation to ``runs/exp1/scalars-rank{N}.csv``
and, when tensorboard is installed, to TensorBoard event files under ``runs/exp1/rank{N}/``
(``tensorboard --logdir runs/exp1``). The layout and the columns are
:mod:`gpudoctor.core.scalars`'s, the same ``gpudoctor run --scalars DIR`` writes.

The records arrive already complete (their loss and GPU time were read without a sync, see
:mod:`gpudoctor.train.events`); GPU utilisation is one NVML query per step
(``torch.cuda.utilization``, a host call of tens of microseconds), left out when NVML cannot
answer.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from gpudoctor.core.scalars import ScalarWriter
from gpudoctor.records.step import StepRecord


class ScalarsObserver:
    """Write step scalars to ``folder`` (CSV always; TensorBoard when ``tensorboard`` allows).

    Args:
        folder: the scalars folder; a folder that already holds this rank's CSV is refused.
        tensorboard: ``None``: when tensorboard is importable; ``False``: CSV only.
        gpu_util: query the GPU's utilisation each step (CUDA runs only).
    """

    def __init__(self, folder: str | Path, *, tensorboard: bool | None = None, gpu_util: bool = True) -> None:
        self.folder = Path(folder)
        self.tensorboard = tensorboard
        self.gpu_util = gpu_util
        self.writer: ScalarWriter | None = None
        self._device: Any = None

    def on_run_start(self, info: dict) -> None:
        self.writer = ScalarWriter(self.folder, int(info["rank"]), tensorboard=self.tensorboard)
        device = str(info.get("device", "cpu"))
        self._device = device if device.startswith("cuda") and self.gpu_util else None

    def on_step_end(self, record: StepRecord) -> None:
        assert self.writer is not None, "on_run_start was not called"
        self.writer.write(record, self._utilization())

    def on_run_end(self, records_emitted: int) -> None:
        if self.writer is not None:
            self.writer.close()

    def _utilization(self) -> float | None:
        if self._device is None:
            return None
        import torch

        try:
            return float(torch.cuda.utilization(self._device))
        except Exception:  # noqa: BLE001 - no NVML (pynvml missing, a container): leave the column empty
            self._device = None
            return None


__all__ = ["ScalarsObserver"]
