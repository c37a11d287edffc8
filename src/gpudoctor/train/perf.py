"""Speed switches: cuDNN autotuning, channels-last, activation checkpointing, ``torch.compile``,
fused optimizers. None of them changes what is computed beyond float rounding."""

from __future__ import annotations

import functools
from collections.abc import Iterable

import torch
from torch.utils.checkpoint import checkpoint

from gpudoctor.train.config import PerfConfig


def configure_backends(config: PerfConfig, device: torch.device) -> None:
    """cuDNN benchmark mode (pick the fastest convolution per shape; shapes must be stable)."""
    if device.type == "cuda":
        torch.backends.cudnn.benchmark = config.cudnn_benchmark


def apply_activation_checkpointing(model: torch.nn.Module, class_names: Iterable[str]) -> int:
    """Recompute the forward of every submodule whose class is named in ``class_names`` during
    the backward pass (``use_reentrant=False``: works with DDP, compile and kwargs). Returns how
    many submodules were wrapped; raises if none matched, since a silently ignored setting hides
    the memory it was meant to save."""
    names = set(class_names)
    if not names:
        return 0
    wrapped = 0
    for module in model.modules():
        if type(module).__name__ in names:
            module.forward = functools.partial(checkpoint, module.forward, use_reentrant=False)
            wrapped += 1
    if not wrapped:
        raise ValueError(
            f"perf.activation_checkpointing names {sorted(names)} but the model has no such submodule; "
            "use the class names of its repeated blocks (e.g. 'Block')"
        )
    return wrapped


def to_channels_last(value: object) -> object:
    """4-D float tensors -> channels-last memory format; everything else unchanged."""
    if isinstance(value, torch.Tensor) and value.dim() == 4 and value.is_floating_point():
        return value.contiguous(memory_format=torch.channels_last)
    return value


def maybe_compile(model: torch.nn.Module, config: PerfConfig) -> torch.nn.Module:
    return torch.compile(model, mode=config.compile_mode) if config.compile else model


def adamw(params: Iterable[torch.nn.Parameter], *, lr: float, weight_decay: float = 0.0,
          betas: tuple[float, float] = (0.9, 0.999), device: torch.device | None = None) -> torch.optim.AdamW:
    """AdamW, fused into one kernel per step on a GPU (``fused=True``), plain on the CPU."""
    fused = device is not None and device.type == "cuda"
    return torch.optim.AdamW(params, lr=lr, weight_decay=weight_decay, betas=betas, fused=fused)
