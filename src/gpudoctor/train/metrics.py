"""Throughput, FLOPs and MFU, and the end-of-run summary a person reads.

MFU = achieved model FLOP/s / the GPU's dense peak in the training precision (``core.specs``).
FLOPs per sample come from the user (``log.flops_per_sample``) or are counted once with
``torch.utils.flop_counter.FlopCounterMode`` over one forward+backward of a real batch. A GPU missing
from the spec table gives ``mfu=None`` with the reason, not a guess.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import torch

from gpudoctor.core.specs import peak_flops


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class FitResult:
    """What ``Trainer.fit`` did, reduced over all ranks."""

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


def _num(value: float | None, fmt: str, unit: str = "") -> str:
    return "n/a" if value is None else f"{value:{fmt}}{unit}"


def format_summary(r: FitResult) -> str:
    """The end-of-run lines rank 0 prints (golden-tested)."""
    batch = (f"{r.global_batch} = {r.per_device_batch} per device x {r.grad_accum_steps} accumulation "
             f"x {r.world_size} ranks")
    lines = [
        f"steps {r.steps}  epochs {r.epochs_completed}  samples {r.samples}  time {r.elapsed_s:.1f}s",
        f"effective global batch {batch}" + (f"  (lr x{r.lr_scale:.3g})" if r.lr_scale != 1.0 else ""),
        f"precision {r.precision}  strategy {r.strategy}  micro-batch split {r.micro_batch_split}",
        f"throughput {r.samples_per_s:,.0f} samples/s  MFU "
        + (_num(None if r.mfu is None else 100 * r.mfu, ".1f", "%") if r.mfu is not None else f"n/a ({r.mfu_reason})"),
        f"train loss {_num(r.train_loss, '.4f')}  val loss {_num(r.val_loss, '.4f')}  skipped steps {r.skipped_steps}",
    ]
    if r.resumed_from_step is not None:
        lines.append(f"resumed from step {r.resumed_from_step}")
    if r.stopped_reason:
        lines.append(f"stopped: {r.stopped_reason}")
    return "\n".join(lines) + "\n"
