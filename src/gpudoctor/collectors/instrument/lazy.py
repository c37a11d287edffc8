"""Read small device values (loss, GradScaler scale) a step later, without a host-device sync.

On CUDA the value is copied ``non_blocking`` into a pinned host buffer and an event is recorded
after the copy; :meth:`LazyValues.poll` reads only the copies whose event has completed
(``Event.query`` never blocks). On the CPU the value is read at once (no device to wait for).
"""

from __future__ import annotations

import math
from collections import deque
from typing import Any


class LazyValues:
    """A queue of pending device reads, each tagged ``(step, field)``."""

    def __init__(self, ring: int = 64) -> None:
        self._pending: deque[tuple[int, str, Any, Any]] = deque()
        self._free: list[tuple[Any, Any]] = []
        self._ring = ring

    def push(self, step: int, field: str, value: Any, *, finite_field: str | None = None) -> list:
        """Queue ``value`` (a tensor) for reading; returns reads that finished at once (CPU)."""
        import torch

        value = value.detach()
        if value.numel() != 1:
            value = value.float().sum()  # one number: enough for the value and its finiteness
        if not value.is_cuda:
            number = float(value.reshape(())) if value.dtype.is_floating_point else float(value)
            return _results(step, field, number, finite_field)
        if self._free:
            host, event = self._free.pop()
        else:
            host = torch.empty((), dtype=torch.float32, pin_memory=True)
            event = torch.cuda.Event()
        # No sync: the copy is queued on the stream; the event tells us when it has landed.
        host.copy_(value.reshape(()).float(), non_blocking=True)
        event.record()
        self._pending.append((step, field, (host, event), finite_field))
        while len(self._pending) > self._ring:  # never grow without bound; drop the oldest
            _, _, slot, _ = self._pending.popleft()
            self._free.append(slot)
        return []

    def poll(self, *, wait: bool = False) -> list[tuple[int, str, Any]]:
        """Finished reads as ``(step, field, value)``; ``wait=True`` blocks (only at exit)."""
        done: list[tuple[int, str, Any]] = []
        while self._pending:
            step, field, (host, event), finite_field = self._pending[0]
            if wait:
                event.synchronize()  # sync point: only when the run is ending
            elif not event.query():
                break
            self._pending.popleft()
            done.extend(_results(step, field, float(host), finite_field))
            self._free.append((host, event))
        return done


def _results(step: int, field: str, number: float, finite_field: str | None) -> list:
    out: list[tuple[int, str, Any]] = [(step, field, number)]
    if finite_field:
        out.append((step, finite_field, math.isfinite(number)))
    return out
