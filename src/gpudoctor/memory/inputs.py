"""Turn command-line descriptions of a model and its input into factories.

- model: ``package.module:function`` returning an ``nn.Module`` (called with no arguments).
- input: ``image:CxHxW:CLASSES`` (float images, integer class targets) or
  ``tokens:SEQ:VOCAB`` (integer tokens, next-token targets of the same shape).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

from gpudoctor.errors import GpuDoctorUserError


def load_factory(spec: str) -> Callable[[], Any]:
    """Import ``module:function``; a clear error names what failed and the expected form."""
    module_name, sep, attr = spec.partition(":")
    if not sep or not module_name or not attr:
        raise GpuDoctorUserError(
            f"--model {spec!r} should be MODULE:FUNCTION, e.g. torchvision.models:resnet18"
        )
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise GpuDoctorUserError(f"cannot import {module_name!r} for --model: {exc}") from None
    try:
        factory = getattr(module, attr)
    except AttributeError:
        raise GpuDoctorUserError(f"{module_name!r} has no {attr!r} (from --model {spec!r})") from None
    if not callable(factory):
        raise GpuDoctorUserError(f"--model {spec!r} is not callable")
    return factory


def batch_factory(spec: str) -> Callable[[int, Any], tuple[Any, Any]]:
    """A ``(batch_size, device) -> (inputs, targets)`` function for an input description."""
    kind, _, rest = spec.partition(":")
    parts = rest.split(":")
    try:
        if kind == "image" and len(parts) == 2:
            shape = tuple(int(v) for v in parts[0].lower().split("x"))
            classes = int(parts[1])
            if len(shape) < 1 or classes < 1 or min(shape) < 1:
                raise ValueError
            return _images(shape, classes)
        if kind == "tokens" and len(parts) == 2:
            seq, vocab = int(parts[0]), int(parts[1])
            if seq < 1 or vocab < 2:
                raise ValueError
            return _tokens(seq, vocab)
    except ValueError:
        pass
    raise GpuDoctorUserError(
        f"--input {spec!r} should be image:CxHxW:CLASSES (e.g. image:3x224x224:1000) "
        "or tokens:SEQ:VOCAB (e.g. tokens:1024:50257)"
    )


def _images(shape: tuple[int, ...], classes: int):
    def make(batch: int, device) -> tuple[Any, Any]:
        import torch

        x = torch.randn((batch, *shape), device=device)
        y = torch.randint(0, classes, (batch,), device=device)
        return x, y

    return make


def _tokens(seq: int, vocab: int):
    def make(batch: int, device) -> tuple[Any, Any]:
        import torch

        x = torch.randint(0, vocab, (batch, seq), device=device)
        y = torch.randint(0, vocab, (batch, seq), device=device)
        return x, y

    return make
