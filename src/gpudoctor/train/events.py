"""Step events: the engine's own timings, delivered to one ``Observer`` protocol as ``StepRecord``s.

Nothing here adds a host-device sync. Each step's loss (and the global gradient norm that
``clip_grad_norm_`` returned, when the engine clips) is copied into a pinned host buffer with a
non-blocking copy and a CUDA event is recorded after it; the record is emitted once the event has
completed (``event.query()`` does not block), normally one or two steps later. Only if the GPU falls
more than ``max_pending`` steps behind does the tracker wait for the oldest event (a sync point that
a GPU-bound loop never reaches because the allocator and the loader throttle the host first).
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections import deque
from pathlib import Path
from typing import Protocol, runtime_checkable

import torch

from gpudoctor.core.memory import allocator_stats
from gpudoctor.records.base import JsonlWriter
from gpudoctor.records.rundir import KIND_STEPS, steps_file
from gpudoctor.records.step import StepRecord


@runtime_checkable
class Observer(Protocol):
    """Receives the engine's events. All three methods are called on every rank."""

    def on_run_start(self, info: dict) -> None: ...

    def on_step_end(self, record: StepRecord) -> None: ...

    def on_run_end(self, records_emitted: int) -> None: ...


class JsonlObserver:
    """Write each rank's records to ``<run_dir>/steps-rank{N}.jsonl`` (what ``gpudoctor run`` reads)."""

    def __init__(self, run_dir: str | Path) -> None:
        self.run_dir = Path(run_dir)
        self._writer: JsonlWriter | None = None

    def on_run_start(self, info: dict) -> None:
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self._writer = JsonlWriter(self.run_dir / steps_file(info["rank"]), kind=KIND_STEPS)

    def on_step_end(self, record: StepRecord) -> None:
        assert self._writer is not None, "on_run_start was not called"
        self._writer.write(record)

    def on_run_end(self, records_emitted: int) -> None:
        if self._writer is not None:
            self._writer.close()


@dataclasses.dataclass(slots=True)
class _Pending:
    record: StepRecord
    loss_buf: torch.Tensor | None
    start: torch.cuda.Event | None
    end: torch.cuda.Event | None
    norm_buf: torch.Tensor | None = None


class StepTracker:
    """Collects per-step facts from the loop and emits finished ``StepRecord``s lazily.

    Args:
        rank: this process's global rank.
        device: the training device.
        observers: who receives the records.
        max_pending: steps the emitted records may lag behind before the tracker waits.
    """

    def __init__(self, rank: int, device: torch.device, observers: list[Observer], max_pending: int = 3) -> None:
        self.rank = rank
        self.device = device
        self.observers = observers
        self.max_pending = max_pending
        self.cuda = device.type == "cuda"
        self._pending: deque[_Pending] = deque()
        self._bufs = [torch.zeros((), pin_memory=self.cuda) for _ in range(max_pending + 2)]
        self._norm_bufs = [torch.zeros((), pin_memory=self.cuda) for _ in range(max_pending + 2)]
        self._next_buf = 0
        self._start: torch.cuda.Event | None = None
        self.last_loss: float | None = None
        self.emitted = 0
        self.nonfinite_steps: list[int] = []

    def step_start(self) -> None:
        """Mark the GPU-side start of a step (an event on the current stream: no sync)."""
        if self.cuda:
            self._start = torch.cuda.Event(enable_timing=True)
            self._start.record()

    def step_end(self, record: StepRecord, loss: torch.Tensor | None,
                 grad_norm: torch.Tensor | None = None) -> None:
        """Queue ``record``; its loss, gradient norm (``clip_grad_norm_``'s tensor) and GPU time
        are filled in when the GPU gets there."""
        buf, norm_buf, end = None, None, None
        slot = self._next_buf
        if loss is not None or grad_norm is not None:
            self._next_buf = (self._next_buf + 1) % len(self._bufs)
        if loss is not None:
            buf = self._bufs[slot]
            buf.copy_(loss.detach(), non_blocking=True)  # D2H into pinned memory: no sync
        if grad_norm is not None:
            norm_buf = self._norm_bufs[slot]
            norm_buf.copy_(grad_norm.detach().float(), non_blocking=True)  # the same: no sync
        if self.cuda:
            end = torch.cuda.Event(enable_timing=True)
            end.record()
        self._pending.append(_Pending(record, buf, self._start, end, norm_buf))
        self.poll()

    def poll(self, *, wait: bool = False) -> None:
        """Emit every finished step; with ``wait=True`` (or too many pending) wait for them."""
        while self._pending:
            head = self._pending[0]
            must_wait = wait or len(self._pending) > self.max_pending
            if head.end is not None and not head.end.query():
                if not must_wait:
                    return
                head.end.synchronize()  # sync point: only when the GPU lags far behind, or at flush
            self._pending.popleft()
            self._emit(head)

    def _emit(self, p: _Pending) -> None:
        changes: dict = {}
        if p.loss_buf is not None:
            loss = float(p.loss_buf)  # host memory, already written: no device sync
            changes["loss"] = loss
            changes["loss_finite"] = math.isfinite(loss)
            self.last_loss = loss
            if not math.isfinite(loss):
                self.nonfinite_steps.append(p.record.step)
        if p.norm_buf is not None:
            changes["grad_norm"] = float(p.norm_buf)  # host memory, already written
        if p.start is not None and p.end is not None:
            changes["gpu_ms"] = p.start.elapsed_time(p.end)
        if self.cuda and self.observers:  # memory_stats() builds a ~200-key dict: only when someone reads it
            changes["mem"] = allocator_stats(self.device)
        record = dataclasses.replace(p.record, **changes)
        self.emitted += 1
        for obs in self.observers:
            obs.on_step_end(record)

    def flush(self) -> None:
        """Emit everything still pending (a sync point: waits for the GPU)."""
        self.poll(wait=True)


def now() -> tuple[float, float]:
    """(``perf_counter`` for durations, ``time.time`` for lining up with GPU samples)."""
    return time.perf_counter(), time.time()
