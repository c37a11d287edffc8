"""Memory mode's module hooks: where the trained model's forward ends, and per-module peaks.

Two global forward hooks (``register_module_forward_pre_hook``/``register_module_forward_hook``)
run during the probed steps of ``gpudoctor memory run`` only (removed after them):

* the outermost call of a module with trainable parameters, under grad mode, is the trained
  model's forward; its start is where a script without a DataLoader gets its ``batch`` stage (the
  inputs made since the last stage), its end is the ``forward`` stage (activations alive),
  whatever the script does next (loss, ``zero_grad()``, backward);
* with ``--modules``, every module call inside it in one step gets its allocated-before, its
  allocated-after and the allocator's peak inside (:class:`ModulePeaks`).

The peak counter is one per device, so nested calls share it: each call's pre-hook folds the
counter into its parent's running peak before resetting it, and its post-hook folds its own
peak back. The stage probe reads :attr:`ModulePeaks.carry` for what the hooks reset away, so
stage peaks stay whole.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from gpudoctor.records.memory import ModuleMemory


@dataclass
class _Frame:
    key: int
    name: str
    type: str
    depth: int
    before: int
    peak_seen: int = 0


@dataclass
class _Row:
    name: str
    type: str
    depth: int
    order: int
    calls: int = 0
    kept: int = 0
    peak: int = 0


@dataclass
class ModulePeaks:
    """Nested per-module peaks from one allocator's counters (CPU-testable with fakes).

    ``allocated()`` and ``peak()`` read the counters, ``reset()`` resets the peak to the
    current allocation (``torch.cuda.reset_peak_memory_stats``).
    """

    allocated: Callable[[], int]
    peak: Callable[[], int]
    reset: Callable[[], None]
    stack: list[_Frame] = field(default_factory=list)
    rows: dict[str, _Row] = field(default_factory=dict)
    carry: int = 0  # the largest peak the hooks reset away outside any module

    def _fold(self, value: int) -> None:
        if self.stack:
            self.stack[-1].peak_seen = max(self.stack[-1].peak_seen, value)
        else:
            self.carry = max(self.carry, value)

    def enter(self, key: int, name: str, type_name: str) -> None:
        self._fold(self.peak())
        self.reset()
        self.stack.append(_Frame(key=key, name=name, type=type_name, depth=len(self.stack),
                                 before=self.allocated()))

    def leave(self, key: int) -> None:
        # a forward that raised never reached its post-hook: drop its frame (and any above)
        while self.stack and self.stack[-1].key != key:
            self.stack.pop()
        if not self.stack:
            return
        frame = self.stack.pop()
        peak = max(frame.peak_seen, self.peak())
        after = self.allocated()
        row = self.rows.get(frame.name)
        if row is None:
            row = self.rows[frame.name] = _Row(name=frame.name, type=frame.type, depth=frame.depth,
                                               order=len(self.rows))
        row.calls += 1
        row.kept += after - frame.before
        row.peak = max(row.peak, peak - frame.before)
        self._fold(peak)
        self.reset()

    def take_carry(self) -> int:
        value, self.carry = self.carry, 0
        return value

    def records(self, step: int) -> list[ModuleMemory]:
        return [ModuleMemory(step=step, name=r.name, type=r.type, depth=r.depth, calls=r.calls,
                             kept_bytes=r.kept, peak_bytes=r.peak, order=r.order)
                for r in self.rows.values()]


def _compiling() -> bool:
    import torch

    compiler = getattr(torch, "compiler", None)
    return bool(compiler is not None and compiler.is_compiling())


def trains(module: Any) -> bool:
    """A module whose forward is a training forward: trainable parameters, grad mode on."""
    import torch

    if not torch.is_grad_enabled():
        return False
    return any(p.requires_grad for p in module.parameters())


class ModuleHooks:
    """The global hooks; ``on_forward_start`` is called when the trained model's forward begins
    (before any module of it is measured, so a stage recorded there may reset the peak counter),
    ``on_forward_end`` when it returns."""

    def __init__(self, *, on_forward_start: Callable[[], None], on_forward_end: Callable[[], None],
                 active: Callable[[], bool], measure_now: Callable[[], bool],
                 peaks: ModulePeaks | None) -> None:
        self.on_forward_start = on_forward_start
        self.on_forward_end = on_forward_end
        self.active = active
        self.measure_now = measure_now
        self.peaks = peaks
        self.depth = 0
        self.root_key: int | None = None  # id of the outermost module of the current forward
        self.names: dict[int, str] = {}
        self.handles: list[Any] = []
        self.measuring = False

    def install(self) -> None:
        from torch.nn.modules import module as module_mod

        self.handles = [module_mod.register_module_forward_pre_hook(self._pre),
                        module_mod.register_module_forward_hook(self._post)]

    def remove(self) -> None:
        for handle in self.handles:
            handle.remove()
        self.handles = []

    def reset(self) -> None:
        """Forget a forward that never returned (it raised): called at ``backward()``."""
        self.root_key, self.depth, self.measuring = None, 0, False
        if self.peaks is not None:
            self.peaks.stack.clear()

    def _pre(self, module: Any, args: Any) -> None:
        if _compiling():  # inside a torch.compile trace: the compiled module's outer call counts
            return
        if not self.active():
            self.remove()
            return
        if self.root_key is None:
            if not trains(module):
                return
            self.root_key = id(module)
            if not self.names or id(module) not in self.names:
                self.names = {id(m): n for n, m in module.named_modules()}
            self.depth = 0
            self.on_forward_start()  # before measuring starts: a stage read resets the peak counter
            self.measuring = self.peaks is not None and self.measure_now()
        self.depth += 1
        if self.measuring:
            assert self.peaks is not None
            self.peaks.enter(id(module), self.names.get(id(module), type(module).__name__),
                             type(module).__name__)

    def _post(self, module: Any, args: Any, output: Any) -> None:
        if self.root_key is None or _compiling():
            return
        if self.measuring and self.peaks is not None:
            self.peaks.leave(id(module))
        self.depth -= 1
        if id(module) == self.root_key and self.depth <= 0:
            self.reset()
            self.on_forward_end()
