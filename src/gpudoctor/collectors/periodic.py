"""The daemon thread the samplers share: start, stop, ``with``, and one loop on absolute deadlines.

:class:`~gpudoctor.collectors.nvml.GpuSampler` (NVML) and
:class:`~gpudoctor.collectors.host.HostSampler` (psutil) differ in what one sample reads and
where it is kept; how they run is the same, and lives here: a daemon thread that calls
``sample_once()`` on the grid ``start + k * interval`` (:class:`~gpudoctor.collectors.cadence.
Deadlines`: a slow sample skips the grid points it missed, never bursts), a callback whose
exceptions are kept rather than raised (a full disk must not kill the sampler), and the CPU time
the thread has used.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Generic, Self, TypeVar

from gpudoctor.collectors.cadence import Deadlines

T = TypeVar("T")


class PeriodicSampler(Generic[T]):
    """Base of a sampler that reads every ``interval`` seconds on a daemon thread.

    A subclass defines ``sample_once()`` and ``available`` (nothing starts when it is False), and
    may override ``_thread_started`` (runs first on the new thread), ``_stopped`` (runs after the
    thread has ended) and the class attributes ``thread_name`` and ``sample_at_start`` (False:
    the first sample comes one interval after start, for readings that measure a span).

    Args:
        interval: seconds between samples (> 0); ``hint`` is the value the error suggests.
        on_sample: called on the sampler thread with each sample; an exception there is kept
            in ``last_error`` and sampling goes on.
        maxlen: samples a subclass keeps (>= 1).
        monotonic: the clock the thread schedules on (test seam).
    """

    thread_name = "gpudoctor-sampler"
    sample_at_start = True

    def __init__(
        self,
        interval: float,
        on_sample: Callable[[T], None] | None,
        maxlen: int,
        *,
        hint: float,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        if not interval > 0:
            raise ValueError(f"interval must be > 0 seconds, got {interval!r}; try {hint}")
        if maxlen < 1:
            raise ValueError(f"maxlen must be at least 1, got {maxlen!r}")
        self.interval = float(interval)
        self.on_sample = on_sample
        self.maxlen = maxlen
        self.last_error: BaseException | None = None
        self.skipped_ticks = 0  # ticks the thread missed because a sample ran past its deadline
        self._monotonic = monotonic
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._cpu_s = 0.0

    # -- what a subclass provides ----------------------------------------------------------------
    available: bool  # a subclass sets it or defines it as a property

    def sample_once(self) -> object:
        raise NotImplementedError

    def _thread_started(self) -> None:
        """Runs first on the sampler thread (per-thread state, e.g. psutil's CPU counters)."""

    def _stopped(self) -> None:
        """Runs in ``stop()`` once the thread has ended (e.g. shut a library down)."""

    # -- the shared part ---------------------------------------------------------------------------
    def _deliver(self, sample: T) -> None:
        """Hand ``sample`` to ``on_sample``; its exception is kept in ``last_error``, not raised."""
        if self.on_sample is None:
            return
        try:
            self.on_sample(sample)
        except Exception as exc:  # a full disk must not kill the sampler
            self.last_error = exc

    def cpu_time_s(self) -> float:
        """CPU seconds the current (or last) sampler thread has used, read after each sample."""
        return self._cpu_s

    def _run(self) -> None:
        self._thread_started()
        self._loop(self._stop.wait)

    def _loop(self, wait: Callable[[float], bool]) -> None:
        """Sample on the grid ``start + k * interval`` until ``wait(seconds)`` returns True."""
        ticks = Deadlines(self.interval, self._monotonic())
        if not self.sample_at_start and wait(ticks.wait_after_tick(self._monotonic())):
            return
        while not self._stop.is_set():
            self.sample_once()
            self._cpu_s = time.thread_time()
            pause = ticks.wait_after_tick(self._monotonic())
            self.skipped_ticks = ticks.skipped
            if wait(pause):
                break

    def start(self) -> Self:
        """Start the daemon thread (does nothing when the sampler is not ``available``)."""
        if self._thread is not None or not self.available:
            return self
        self._stop.clear()
        self._cpu_s = 0.0
        self._thread = threading.Thread(target=self._run, name=self.thread_name, daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop the thread and wait for the sample in flight."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        self._stopped()

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


__all__ = ["PeriodicSampler"]
