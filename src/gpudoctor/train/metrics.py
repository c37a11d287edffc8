"""Throughput, FLOPs and MFU, and the end-of-run summary a person reads.

MFU = achieved model FLOP/s / the GPU's dense peak in the training precision (``core.specs``).
FLOPs per sample come from the user (``log.flops_per_sample``) or are counted once with
``torch.utils.flop_counter.FlopCounterMode`` over one forward+backward of a real batch. A GPU missing
from the spec table gives ``mfu=None`` with the reason, not a guess.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable

import torch

from gpudoctor.core.specs import peak_flops


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class FitResult:
    """What ``Trainer.fit`` did, reduced over all ranks.

    ``samples_per_s`` and ``mfu`` are steady-state figures: over the steps after the first
    ``log.warmup_steps`` (compilation, cuDNN autotuning, loader workers starting), with
    evaluation and checkpoint writing left out. ``startup_s`` is the wall time before that
    (``first_batch_s`` of it waiting for the first batch). A run too short to have steady steps
    reports its whole-run rate there (``steady_steps == 0``). ``overall_samples_per_s`` is
    samples over ``elapsed_s``, everything included.
    """

    steps: int
    epochs_completed: int
    samples: int
    elapsed_s: float
    samples_per_s: float
    global_batch: int
    per_device_batch: int | None
    grad_accum_steps: int
    world_size: int
    precision: str
    strategy: str
    micro_batch_split: int
    skipped_steps: int
    resumed_from_step: int | None
    train_loss: float | None
    val_loss: float | None
    flops_per_sample: float | None
    mfu: float | None
    mfu_reason: str | None
    lr_scale: float
    stopped_reason: str | None
    overall_samples_per_s: float = 0.0
    steady_steps: int = 0
    warmup_steps: int = 0
    startup_s: float | None = None
    first_batch_s: float | None = None


class RunClock:
    """Splits a run's wall time into start-up and steady training (evaluation and saves left out).

    The loop calls :meth:`begin_steady` right after a host-device sync at the end of the last
    warm-up step, :meth:`pause`/:meth:`resume` around evaluation and checkpoint writes (after a
    sync, so the GPU's pending steps are counted as training) and :meth:`stop` after the final
    sync; every boundary is therefore where the GPU really was.
    """

    def __init__(self) -> None:
        self.t0 = self._mark = time.perf_counter()
        self.startup_s: float | None = None
        self.steady_s = 0.0
        self.steady_samples = 0
        self.steady_steps = 0
        self.first_batch_s: float | None = None
        self._running = False

    @property
    def steady(self) -> bool:
        return self.startup_s is not None

    def begin_steady(self) -> None:
        now = time.perf_counter()
        self.startup_s, self._mark, self._running = now - self.t0, now, True

    def step_done(self, samples: int) -> None:
        if self.steady:
            self.steady_samples += samples
            self.steady_steps += 1

    def pause(self) -> None:
        if self._running:
            self.steady_s += time.perf_counter() - self._mark
            self._running = False

    def resume(self) -> None:
        if self.steady and not self._running:
            self._mark, self._running = time.perf_counter(), True

    def stop(self) -> float:
        """End the steady span; return the whole run's wall time so far."""
        self.pause()
        return time.perf_counter() - self.t0


def count_flops(fn: Callable[[], None]) -> int:
    """FLOPs executed by ``fn()`` (matmuls and convolutions, forward and backward)."""
    from torch.utils.flop_counter import FlopCounterMode

    with FlopCounterMode(display=False) as counter:
        fn()
    return int(counter.get_total_flops())


def mfu(flops_per_sample: float | None, samples_per_s_per_device: float, device: torch.device,
        dtype: str) -> tuple[float | None, str | None]:
    """(MFU as a fraction, None) or (None, why it is unknown)."""
    if device.type != "cuda":
        return None, "MFU needs a GPU"
    if flops_per_sample is None:
        return None, "FLOPs per sample unknown (set log.flops_per_sample)"
    name = torch.cuda.get_device_name(device)
    peak = peak_flops(name, dtype)
    if peak is None:
        return None, f"peak {dtype} FLOP/s of {name!r} is not in gpu_specs.toml"
    return flops_per_sample * samples_per_s_per_device / peak, None


def lr_scale_factor(rule: str, global_batch: int, base_batch: int | None) -> float:
    """Learning-rate multiplier for ``global_batch`` under ``rule`` (linear or square-root scaling)."""
    if rule == "none" or base_batch is None:
        return 1.0
    ratio = global_batch / base_batch
    return ratio if rule == "linear" else ratio**0.5


def scale_lr(optimizer: torch.optim.Optimizer, scheduler: object, factor: float) -> None:
    """Multiply every learning rate (and a scheduler's base rates) by ``factor``."""
    if factor == 1.0:
        return
    for group in optimizer.param_groups:
        group["lr"] *= factor
        if "initial_lr" in group:
            group["initial_lr"] *= factor
    if scheduler is not None and hasattr(scheduler, "base_lrs"):
        scheduler.base_lrs = [lr * factor for lr in scheduler.base_lrs]


def _num(value: float | None, fmt: str, unit: str = "") -> str:
    return "n/a" if value is None else f"{value:{fmt}}{unit}"


def _startup_line(r: FitResult) -> str:
    if r.startup_s is None:
        return f"start-up not separated  whole run {r.overall_samples_per_s:,.0f} samples/s"
    first = f" (first batch {r.first_batch_s:.1f}s)" if r.first_batch_s is not None else ""
    return (f"start-up {r.startup_s:.1f}s over {r.warmup_steps} warm-up steps{first}  "
            f"whole run {r.overall_samples_per_s:,.0f} samples/s")


def format_summary(r: FitResult) -> str:
    """The end-of-run lines rank 0 prints (golden-tested)."""
    batch = (f"{r.global_batch} = {r.per_device_batch} per device x {r.grad_accum_steps} accumulation "
             f"x {r.world_size} ranks")
    lines = [
        f"steps {r.steps}  epochs {r.epochs_completed}  samples {r.samples}  time {r.elapsed_s:.1f}s",
        f"effective global batch {batch}" + (f"  (lr x{r.lr_scale:.3g})" if r.lr_scale != 1.0 else ""),
        f"precision {r.precision}  strategy {r.strategy}  micro-batch split {r.micro_batch_split}",
        f"throughput {r.samples_per_s:,.0f} samples/s  MFU "
        + (_num(None if r.mfu is None else 100 * r.mfu, ".1f", "%") if r.mfu is not None else f"n/a ({r.mfu_reason})")
        + (f"  (steady, {r.steady_steps} steps)" if r.steady_steps else "  (whole run: too few steps)"),
        _startup_line(r),
        f"train loss {_num(r.train_loss, '.4f')}  val loss {_num(r.val_loss, '.4f')}  skipped steps {r.skipped_steps}",
    ]
    if r.resumed_from_step is not None:
        lines.append(f"resumed from step {r.resumed_from_step}")
    if r.stopped_reason:
        lines.append(f"stopped: {r.stopped_reason}")
    return "\n".join(lines) + "\n"
