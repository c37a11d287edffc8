"""Turn command-line descriptions of a model and its input into factories.

- model: ``package.module:function`` or ``path/to/file.py:function`` returning an ``nn.Module``
  (called with no arguments); a module in the current folder is found.
- input: ``image:CxHxW:CLASSES`` (float images, integer class targets) or
  ``tokens:SEQ:VOCAB`` (integer tokens, next-token targets of the same shape).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from gpudoctor.errors import GpuDoctorUserError


def load_factory(spec: str) -> Callable[[], Any]:
    """Import ``module:function`` or ``path/to/file.py:function`` (as ``tune --target`` takes it;
    a module in the current folder is found); a clear error names what failed and the forms."""
    from gpudoctor.core.user_code import import_callable

    return import_callable(spec, option="--model", example="torchvision.models:resnet18")


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
