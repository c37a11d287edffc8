"""The ``non_blocking`` knob of ``--try``: host-to-GPU copies from pinned memory become asynchronous.

``Tensor.to(<a CUDA device>)`` and ``Tensor.cuda()`` of a pinned host tensor, called without a
``non_blocking`` argument (keyword or positional), get ``non_blocking=True``: the copy is queued
and the host goes on (safe from pinned memory: the caching host allocator keeps a pinned block
until the copies using it are done). Only in the training process itself: in a DataLoader
worker, ``is_pinned()`` would touch CUDA after a fork. A dtype or layout change that stays on
the host is left alone. :data:`COPIES` counts the copies changed, so the run can say when the
knob found nothing to change.
"""

from __future__ import annotations

from typing import Any

from gpudoctor.collectors.instrument.state import S, is_owner

COPIES = [0]  # copies given non_blocking=True in this process


def _compiling() -> bool:
    from gpudoctor.collectors.instrument import patches

    return bool(patches._is_compiling())


def install(torch: Any) -> None:
    """Wrap ``Tensor.to`` and ``Tensor.cuda`` (outside the probes' own wrappers)."""
    Tensor = torch.Tensor
    inner_to, inner_cuda = Tensor.to, Tensor.cuda

    def pinned_source(self: Any, args: tuple, kwargs: dict) -> bool:
        if self.is_cuda or "non_blocking" in kwargs or S.quiet or _compiling() or not is_owner():
            return False
        if any(a is True or a is False for a in args):
            return False  # non_blocking given positionally
        return bool(self.is_pinned())

    def to_cuda(args: tuple, kwargs: dict) -> bool:
        device = kwargs.get("device")
        for a in args if device is None else ():
            if isinstance(a, (str, torch.device)) or (isinstance(a, int) and not isinstance(a, bool)):
                device = a
                break
            if isinstance(a, Tensor):
                device = a.device
                break
        if device is None:
            return False  # a dtype or memory-format change stays on the host
        return isinstance(device, int) or torch.device(device).type == "cuda"

    def to(self, *args, **kwargs):
        if to_cuda(args, kwargs) and pinned_source(self, args, kwargs):
            kwargs["non_blocking"] = True
            COPIES[0] += 1
        return inner_to(self, *args, **kwargs)

    def cuda(self, *args, **kwargs):
        if pinned_source(self, args, kwargs):
            kwargs["non_blocking"] = True
            COPIES[0] += 1
        return inner_cuda(self, *args, **kwargs)

    for name, fn, inner in (("to", to, inner_to), ("cuda", cuda, inner_cuda)):
        fn.__name__, fn.__doc__, fn.__wrapped__ = name, inner.__doc__, inner
        setattr(Tensor, name, fn)
