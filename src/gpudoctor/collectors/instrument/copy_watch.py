"""Memory mode's watch for the first batch copy of a script without a DataLoader.

``gpudoctor memory run`` takes its ``model`` line (weights and start-up allocations) before the
first batch reaches the device. With a DataLoader that is its first ``__next__``; without one,
the first host-to-device copy that allocates (``Tensor.to(cuda)``, ``Tensor.cuda()``) and is not
a start-up move: ``Module._apply`` (``model.to(device)``, ``model.cuda()``) and
``Optimizer.load_state_dict`` (state cast to the parameters' device) are skipped. ``copy_`` into a
tensor already on the device allocates nothing and is not watched (``load_state_dict`` of a model
already on the GPU). A start-up copy of anything else (class weights, normalisation constants, a
whole data set moved once) is taken as the first batch's: its bytes count in step 0's batch.

The watch is the callback :attr:`CopyWatch.before_copy`, called before the copy while
:attr:`CopyWatch.wanted` says so (until the model line is written or a loader is seen).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


def _to_cuda(args: tuple, kwargs: dict) -> bool:
    """``Tensor.to``'s arguments name a CUDA device (parsed as ``Module.to`` parses them)."""
    import torch

    try:
        device = torch._C._nn._parse_to(*args, **kwargs)[0]
    except Exception:  # noqa: BLE001 - bad arguments: Tensor.to raises them itself
        return False
    return device is not None and device.type == "cuda"


class CopyWatch:
    """Wraps ``Tensor.to``/``.cuda``, ``Module._apply`` and ``Optimizer.load_state_dict``."""

    def __init__(self, *, wanted: Callable[[], bool], before_copy: Callable[[], None]) -> None:
        self.wanted = wanted
        self.before_copy = before_copy
        self.moving = 0  # inside a start-up move: its copies are the model's, not a batch

    def install(self, torch: Any) -> None:
        Tensor, Module, Optimizer = torch.Tensor, torch.nn.Module, torch.optim.Optimizer
        orig_to, orig_cuda = Tensor.to, Tensor.cuda
        watch = self

        def to(self, *args, **kwargs):
            if watch.wanted() and not watch.moving and not self.is_cuda and _to_cuda(args, kwargs):
                watch.before_copy()
            return orig_to(self, *args, **kwargs)

        def cuda(self, *args, **kwargs):
            if watch.wanted() and not watch.moving and not self.is_cuda:
                watch.before_copy()
            return orig_cuda(self, *args, **kwargs)

        for name, fn, orig in (("to", to, orig_to), ("cuda", cuda, orig_cuda)):
            fn.__name__, fn.__doc__, fn.__wrapped__ = name, orig.__doc__, orig
            setattr(Tensor, name, fn)
        Module._apply = self._moving(Module._apply)
        Optimizer.load_state_dict = self._moving(Optimizer.load_state_dict)

    def _moving(self, orig: Any) -> Any:
        watch = self

        def wrapper(self, *args, **kwargs):
            watch.moving += 1
            try:
                return orig(self, *args, **kwargs)
            finally:
                watch.moving -= 1

        wrapper.__name__, wrapper.__doc__, wrapper.__wrapped__ = orig.__name__, orig.__doc__, orig
        return wrapper
