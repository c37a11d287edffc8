"""Speed switches: cuDNN autotuning, channels-last, activation checkpointing, ``torch.compile``,
fused optimizers. None of them changes what is computed beyond float rounding. And the one that
trades speed for repeatability: ``perf.deterministic``."""

from __future__ import annotations

import functools
import os
from collections.abc import Callable, Iterable

import torch
from torch.utils.checkpoint import checkpoint

from gpudoctor.train.config import PerfConfig


CUBLAS_WORKSPACE = ":4096:8"  # PyTorch's reproducibility notes: cuBLAS is deterministic with it


def prepare_deterministic(config: PerfConfig) -> str:
    """Before CUDA starts: ``CUBLAS_WORKSPACE_CONFIG`` for ``perf.deterministic`` (cuBLAS reads it
    when it creates its handle's workspace). Returns a note when it came too late, else ``""``."""
    if not config.deterministic:
        return ""
    if os.environ.get("CUBLAS_WORKSPACE_CONFIG") in (":4096:8", ":16:8"):
        return ""
    os.environ["CUBLAS_WORKSPACE_CONFIG"] = CUBLAS_WORKSPACE
    if torch.cuda.is_initialized():
        return ("perf.deterministic: CUDA had started before the engine set CUBLAS_WORKSPACE_CONFIG; "
                f"export CUBLAS_WORKSPACE_CONFIG={CUBLAS_WORKSPACE} before the script for cuBLAS to follow it")
    return ""


def configure_backends(config: PerfConfig, device: torch.device) -> None:
    """cuDNN benchmark mode (pick the fastest convolution per shape; shapes must be stable), or
    ``perf.deterministic``: deterministic algorithms everywhere, cuDNN deterministic, no autotuning."""
    if config.deterministic:
        torch.use_deterministic_algorithms(True, warn_only=config.deterministic_warn_only)
        torch.backends.cudnn.deterministic = True
        torch.backends.cudnn.benchmark = False
        return
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


def resolve_channels_last(setting: bool | None, model: torch.nn.Module, device: torch.device, *,
                          sharded: bool = False) -> bool:
    """``perf.channels_last``: ``None`` (auto) -> on for a model with a 2-D convolution on a CUDA GPU,
    unless the model is sharded with FSDP2 (``sharded``).

    Why auto and not always: NHWC only pays where cuDNN convolutions run (bf16/tf32 NCHW convs make
    cuDNN transpose around every layer), while for a model without convolutions it changes nothing
    but can break a ``.view`` on 4-D inputs.

    Why not under FSDP2: ``fully_shard`` refuses NHWC weights (``NotImplementedError: FSDP does not
    support non-contiguous parameters``), and converting after sharding fails too (the sharded
    parameters are flat views: ``RuntimeError: view size is not compatible``; both checked with
    torch 2.14 on gloo). So auto turns it off and forcing it on is a configuration error.
    """
    if sharded:
        if setting:
            raise ValueError(
                "perf.channels_last=true cannot be used with parallel.strategy='fsdp': FSDP2 (fully_shard) "
                "does not support channels-last (non-contiguous) weights; set perf.channels_last to false "
                "or leave it out (auto turns it off under FSDP2), or use parallel.strategy='ddp'"
            )
        return False
    if setting is not None:
        return setting
    return device.type == "cuda" and any(isinstance(m, torch.nn.Conv2d) for m in model.modules())


def to_channels_last(value: object) -> object:
    """4-D float tensors -> channels-last memory format; everything else unchanged."""
    if isinstance(value, torch.Tensor) and value.dim() == 4 and value.is_floating_point():
        return value.contiguous(memory_format=torch.channels_last)
    return value


def maybe_compile(fn: Callable, config: PerfConfig) -> Callable:
    """``torch.compile(fn)`` (a module or a function) when ``perf.compile`` is set, else ``fn``."""
    return torch.compile(fn, mode=config.compile_mode) if config.compile else fn


def adamw(params: Iterable[torch.nn.Parameter], *, lr: float, weight_decay: float = 0.0,
          betas: tuple[float, float] = (0.9, 0.999), device: torch.device | None = None) -> torch.optim.AdamW:
    """AdamW, fused into one kernel per step on a GPU (``fused=True``), plain on the CPU."""
    fused = device is not None and device.type == "cuda"
    return torch.optim.AdamW(params, lr=lr, weight_decay=weight_decay, betas=betas, fused=fused)
