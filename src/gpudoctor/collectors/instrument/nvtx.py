"""``--nvtx``: NVTX ranges for Nsight Systems around each step, optimizer step and data wait.

Ranges (``torch.cuda.nvtx``, nested on the training thread):

* ``gpudoctor step N`` — from the end of optimizer step N-1 to the end of step N (the first one
  from installation);
* ``optimizer.step`` — the optimizer step itself (pre hook to post hook);
* ``data wait`` — each ``DataLoader`` ``__next__``.

Pushing a range is a host-side call into the NVTX library (no device work, no sync). Without
CUDA nothing is installed and :func:`install` says so. Only the process that installed them
(not a forked loader worker) pushes ranges.
"""

from __future__ import annotations

import os
import weakref
from collections.abc import Callable
from typing import Any

STEP = "gpudoctor step {}"
OPTIMIZER = "optimizer.step"
DATA = "data wait"


class _Ranges:
    def __init__(self, nvtx: Any, enabled: Callable[[], bool]) -> None:
        self.nvtx = nvtx
        self.enabled = enabled
        self.pid = os.getpid()
        self.step = 0
        self.open_step = False
        self.optimizers: list[int] = []  # ids of the optimizers inside their step, innermost last
        self.primary: Any = None  # the first optimizer that steps ends the "gpudoctor step" ranges

    def begin_step(self) -> None:
        self.nvtx.range_push(STEP.format(self.step))
        self.open_step = True

    def pre(self, optimizer: Any, args: Any, kwargs: Any) -> None:
        if os.getpid() == self.pid and self.enabled():
            self.optimizers.append(id(optimizer))
            self.nvtx.range_push(OPTIMIZER)

    def post(self, optimizer: Any, args: Any, kwargs: Any) -> None:
        if os.getpid() != self.pid:
            return
        if self.optimizers and self.optimizers[-1] == id(optimizer):
            self.optimizers.pop()
            self.nvtx.range_pop()  # optimizer.step
        if self.primary is None:
            self.primary = weakref.ref(optimizer)
        if self.primary() is not optimizer or self.optimizers:
            return
        if self.open_step:
            self.nvtx.range_pop()
            self.open_step = False
        if self.enabled():  # after gpudoctor.watch ended: every range is closed, none opened
            self.step += 1
            self.begin_step()


def install(handles: list[Any], torch: Any = None, enabled: Callable[[], bool] = lambda: True) -> str:
    """Install the ranges; the hook handles go into ``handles`` (to remove them later).

    ``enabled``: while it says no, no range is opened (``gpudoctor.watch`` after its steps).
    Returns a note for the user when nothing was installed (no CUDA), else ``""``. The
    ``DataLoader`` wrapper is set on the class; :mod:`gpudoctor.collectors.inprocess` takes it
    out again with the other patches.
    """
    if torch is None:
        import torch
    if not torch.cuda.is_available():
        return "--nvtx: no CUDA device, no NVTX ranges"
    import torch.optim.optimizer as optim_mod
    from torch.utils.data import dataloader as dl

    ranges = _Ranges(torch.cuda.nvtx, enabled)
    handles.append(optim_mod.register_optimizer_step_pre_hook(ranges.pre))
    handles.append(optim_mod.register_optimizer_step_post_hook(ranges.post))
    base = dl._BaseDataLoaderIter
    inner = base.__next__

    def __next__(self: Any) -> Any:
        if os.getpid() != ranges.pid:
            return inner(self)
        ranges.nvtx.range_push(DATA)
        try:
            return inner(self)
        finally:
            ranges.nvtx.range_pop()

    __next__.__wrapped__ = inner  # type: ignore[attr-defined]
    base.__next__ = __next__
    ranges.begin_step()
    return ""


__all__ = ["DATA", "OPTIMIZER", "STEP", "install"]
