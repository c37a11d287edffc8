"""Timers with explicit synchronisation points.

GPU work is asynchronous: a host clock read right after a launch measures the launch, not the
work (seed 001 §1.3, 002 §3.3). :class:`CudaEventTimer` records events on the stream and reads
them *lazily* — :meth:`CudaEventTimer.poll` never blocks, so a training step gets no added sync;
:meth:`CudaEventTimer.elapsed_ms` with ``sync=True`` is the one place that waits, and says so.
"""

from __future__ import annotations

import time
from collections import deque
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # pragma: no cover
    import torch


class Stopwatch:
    """Host wall-clock timer (``time.perf_counter``). Measures host time only."""

    def __init__(self) -> None:
        self._start: float | None = None
        self.elapsed_s = 0.0

    def __enter__(self) -> Stopwatch:
        self._start = time.perf_counter()
        return self

    def __exit__(self, *exc: object) -> None:
        assert self._start is not None
        self.elapsed_s = time.perf_counter() - self._start

    @property
    def elapsed_ms(self) -> float:
        return self.elapsed_s * 1000.0


class CudaEventTimer:
    """Time spans on a CUDA stream with events, read back without blocking the host.

    Usage::

        timer = CudaEventTimer()
        span = timer.start()        # records a start event on the current stream
        ...                         # launch GPU work
        timer.stop(span, tag=step)  # records the end event; nothing waits
        for tag, ms in timer.poll():  # only spans whose end event has completed
            ...
    """

    def __init__(self, max_pending: int = 1024) -> None:
        self._pending: deque[tuple[object, torch.cuda.Event, torch.cuda.Event]] = deque()
        self._max_pending = max_pending
        self._free: list[torch.cuda.Event] = []

    def _event(self) -> torch.cuda.Event:
        import torch

        return self._free.pop() if self._free else torch.cuda.Event(enable_timing=True)

    def start(self) -> torch.cuda.Event:
        event = self._event()
        event.record()
        return event

    def stop(self, start: torch.cuda.Event, *, tag: object = None) -> None:
        end = self._event()
        end.record()
        self._pending.append((tag, start, end))
        if len(self._pending) > self._max_pending:  # never grow without bound on long runs
            _, s, e = self._pending.popleft()
            self._free.extend((s, e))

    def poll(self) -> list[tuple[object, float]]:
        """Return ``(tag, milliseconds)`` for every finished span, oldest first. Never blocks."""
        done = []
        while self._pending and self._pending[0][2].query():
            tag, start, end = self._pending.popleft()
            done.append((tag, start.elapsed_time(end)))
            self._free.extend((start, end))
        return done

    def elapsed_ms(self, *, sync: bool) -> list[tuple[object, float]]:
        """All spans; with ``sync=True`` this WAITS for the GPU (a host-device sync point)."""
        if sync:
            for _, _, end in self._pending:
                end.synchronize()
        return self.poll()
