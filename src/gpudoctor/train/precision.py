"""Precision policy: the autocast context, the scaled backward and the optimizer step in the right order.

With fp16 the order is the one the AMP docs give and that hand-written loops get wrong:
``scale(loss).backward()`` -> ``unscale_(optimizer)`` -> clip -> ``scaler.step`` -> ``scaler.update``.
A step the scaler skipped (inf/NaN gradients) is reported, so the loop does not step the LR scheduler
for it (Lightning #5558). The loss is always reduced in fp32.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable
from typing import Any

import torch

from gpudoctor.train.config import PrecisionConfig


def resolve_dtype(name: str, device: torch.device) -> str:
    """``auto`` -> ``bf16`` on a GPU that supports it, else ``fp32``; other names unchanged.

    Raises:
        ValueError: ``fp16``/``bf16``/``tf32`` asked for on a device that cannot do it.
    """
    if name == "auto":
        if device.type == "cuda" and torch.cuda.is_bf16_supported():
            return "bf16"
        return "fp32"
    if device.type == "cpu" and name in ("fp16", "tf32"):
        raise ValueError(f"precision.dtype={name!r} needs a CUDA GPU; use 'bf16' or 'fp32' on the CPU")
    if device.type == "cuda" and name == "bf16" and not torch.cuda.is_bf16_supported():
        raise ValueError("this GPU has no bf16; use precision.dtype='fp16' (with GradScaler) instead")
    return name


def to_fp32(value: Any) -> Any:
    """Cast floating tensors in a (nested) output to fp32 so the loss is reduced in fp32."""
    if isinstance(value, torch.Tensor):
        return value.float() if value.is_floating_point() and value.dtype != torch.float32 else value
    if isinstance(value, dict):
        return {k: to_fp32(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(to_fp32(v) for v in value)
    return value


class Precision:
    """One object per run; the loop calls ``autocast``, ``backward`` and ``step``.

    Example::

        precision = Precision(PrecisionConfig(dtype="bf16"), device)
        with precision.autocast():
            out = model(x)
        loss = loss_fn(to_fp32(out), y)
        precision.backward(loss)
        stepped = precision.step(optimizer, model.parameters())
    """

    def __init__(self, config: PrecisionConfig, device: torch.device) -> None:
        self.config = config
        self.device = device
        self.last_grad_norm: torch.Tensor | None = None  # the last step's clip_grad_norm_ result
        self.dtype_name = resolve_dtype(config.dtype, device)
        self.autocast_dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(self.dtype_name)
        if device.type == "cuda":
            # TF32 matmuls for "tf32" and for the fp32 parts of mixed precision; exact fp32 otherwise.
            allow = self.dtype_name != "fp32"
            torch.backends.cuda.matmul.allow_tf32 = allow
            torch.backends.cudnn.allow_tf32 = allow
        self.scaler = torch.amp.GradScaler(
            device.type,
            init_scale=config.init_scale,
            growth_interval=config.growth_interval,
            enabled=self.dtype_name == "fp16",
        )

    @property
    def peak_dtype(self) -> str:
        """The column of the GPU spec table that bounds this precision's matmuls (for MFU)."""
        return {"fp16": "bf16", "bf16": "bf16"}.get(self.dtype_name, self.dtype_name)

    def autocast(self) -> contextlib.AbstractContextManager:
        """The forward-pass context: autocast for bf16/fp16, nothing for fp32/tf32."""
        if self.autocast_dtype is None:
            return contextlib.nullcontext()
        return torch.autocast(self.device.type, dtype=self.autocast_dtype)

    def backward(self, loss: torch.Tensor) -> None:
        """``loss.backward()``, scaled first when a GradScaler is active."""
        self.scaler.scale(loss).backward()

    def step(self, optimizer: torch.optim.Optimizer, params: Iterable[torch.Tensor]) -> bool:
        """Unscale, clip, step and update; return whether the optimizer really stepped.

        Without fp16 this adds no host-device sync and always returns True. With fp16,
        ``scaler.step`` already syncs to read its inf/NaN flag, and ``get_scale`` below is a second
        (cheap) sync point: a lowered scale means this step was skipped.
        """
        clip = self.config.grad_clip_norm
        self.last_grad_norm = None
        if not self.scaler.is_enabled():
            if clip is not None:
                self._keep_norm(torch.nn.utils.clip_grad_norm_(params, clip))  # a tensor: no sync
            optimizer.step()
            return True
        self.scaler.unscale_(optimizer)  # clip must see true gradients, not scaled ones
        if clip is not None:
            self._keep_norm(torch.nn.utils.clip_grad_norm_(params, clip))
        scale_before = self.scaler.get_scale()  # sync point (fp16 only)
        self.scaler.step(optimizer)  # sync point inside: reads found_inf
        self.scaler.update()
        return self.scaler.get_scale() >= scale_before  # sync point (fp16 only)

    def _keep_norm(self, norm: torch.Tensor) -> None:
        """The global gradient norm ``clip_grad_norm_`` returned, still on the device (read later,
        with the loss, by the step tracker: no sync here). FSDP2 returns a replicated DTensor."""
        to_local = getattr(norm, "to_local", None)
        norm = to_local() if callable(to_local) else norm
        self.last_grad_norm = norm.detach() if isinstance(norm, torch.Tensor) else None

    def scale_value(self) -> float | None:
        """The current loss scale (a sync point), or None without a scaler."""
        return self.scaler.get_scale() if self.scaler.is_enabled() else None

    def state_dict(self) -> dict[str, Any]:
        return self.scaler.state_dict() if self.scaler.is_enabled() else {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if state and self.scaler.is_enabled():
            self.scaler.load_state_dict(state)
