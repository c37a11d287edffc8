"""Named configurations: a preset is a function returning a ``TrainConfig`` (torchtitan recipes).

Start from one and change what differs: ``presets.single_gpu_bf16().replace(grad_accum_steps=4)``.
"""

from __future__ import annotations

import dataclasses

from gpudoctor.train.config import (
    CheckpointConfig,
    ParallelConfig,
    PerfConfig,
    PrecisionConfig,
    RobustConfig,
    TrainConfig,
)


def cpu_debug() -> TrainConfig:
    """Exact fp32 on the CPU, no progress bar: for tests and for checking a script quickly."""
    return TrainConfig(device="cpu", precision=PrecisionConfig(dtype="fp32"),
                       log=dataclasses.replace(TrainConfig().log, progress_bar=False))


def single_gpu_bf16(*, compile: bool = False) -> TrainConfig:
    """One GPU, bf16 autocast, cuDNN autotuning."""
    return TrainConfig(precision=PrecisionConfig(dtype="bf16"), perf=PerfConfig(compile=compile))


def convnet_bf16() -> TrainConfig:
    """Convolution nets: bf16 with channels-last activations and weights (tensor-core friendly)."""
    return TrainConfig(precision=PrecisionConfig(dtype="bf16"), perf=PerfConfig(channels_last=True))


def transformer_bf16(*, compile: bool = True, grad_clip_norm: float = 1.0) -> TrainConfig:
    """Transformers: bf16, compiled, gradient clipping at 1.0."""
    return TrainConfig(precision=PrecisionConfig(dtype="bf16", grad_clip_norm=grad_clip_norm),
                       perf=PerfConfig(compile=compile))


def ddp_bf16_accum(grad_accum_steps: int = 4, *, checkpoint_dir: str | None = None) -> TrainConfig:
    """DDP under torchrun with gradient accumulation (no_sync on non-final micro-steps) and,
    with a checkpoint folder, automatic resume after ``torchrun --max-restarts``."""
    ckpt = CheckpointConfig(dir=checkpoint_dir, every_steps=500 if checkpoint_dir else None)
    return TrainConfig(grad_accum_steps=grad_accum_steps, precision=PrecisionConfig(dtype="bf16"),
                       parallel=ParallelConfig(strategy="ddp"), checkpoint=ckpt)


def fsdp_bf16(shard_modules: tuple[str, ...] = ("Block",), *, activation_checkpointing: bool = False) -> TrainConfig:
    """FSDP2 (``fully_shard`` per block, then the root) with bf16; optionally recompute blocks."""
    return TrainConfig(
        precision=PrecisionConfig(dtype="bf16"),
        parallel=ParallelConfig(strategy="fsdp", fsdp_shard_modules=shard_modules),
        perf=PerfConfig(activation_checkpointing=shard_modules if activation_checkpointing else ()),
    )


def fp16_scaled() -> TrainConfig:
    """GPUs without bf16 (V100, T4): fp16 autocast with a GradScaler, skip steps on inf/NaN."""
    return TrainConfig(precision=PrecisionConfig(dtype="fp16"), robust=RobustConfig(nonfinite="off"))


PRESETS = {f.__name__: f for f in (cpu_debug, single_gpu_bf16, convnet_bf16, transformer_bf16, ddp_bf16_accum,
                                   fsdp_bf16, fp16_scaled)}
