"""When the samplers read: absolute deadlines for the loop, slower cadences for costly metrics.

Why absolute deadlines: ``sleep(interval)`` after each sample drifts by the sample's own cost
(a 40 ms PCIe read at 10 Hz would give 7 samples/s). Ticks sit on the grid
``start + k * interval``; a tick that runs long skips the grid points it missed instead of
firing a burst to catch up, so the achieved rate is the asked rate whenever a sample costs less
than the interval, and never more than it.

Why slower cadences: some NVML reads cost far more than the rest (the per-process list is a
heavy driver query, ``nvmlDeviceGetPcieThroughput`` blocks ~20 ms per counter) or change only
when an administrator acts (the power limit, the volatile ECC count). They are read on their
own cadence and their last value is repeated in between, as ``nvidia-smi dmon`` does.
"""

from __future__ import annotations


class Deadlines:
    """A ticker on the grid ``start + k * interval`` (seconds of a monotonic clock).

    Args:
        interval: seconds between ticks (> 0).
        start: the time of tick 0.
    """

    __slots__ = ("interval", "next", "skipped")

    def __init__(self, interval: float, start: float) -> None:
        if not interval > 0:
            raise ValueError(f"interval must be > 0 seconds, got {interval!r}; try 0.2")
        self.interval = float(interval)
        self.next = float(start)
        self.skipped = 0  # grid points missed because a tick ran past them

    def wait_after_tick(self, now: float) -> float:
        """Advance to the next grid point after the tick that just ended at ``now``.

        Returns:
            Seconds to wait from ``now`` (0 or more). Grid points already past are skipped and
            counted in ``skipped``: a slow tick never causes a burst of catch-up ticks.
        """
        self.next += self.interval
        if self.next <= now:
            missed = int((now - self.next) // self.interval) + 1
            self.next += missed * self.interval
            self.skipped += missed
        return self.next - now


class Every:
    """Is a slow metric due? Due on the first call, then once ``interval`` seconds have passed.

    Times come from the sample clock (the same reading the sample is stamped with). ``slack``
    absorbs scheduling jitter: at 10 Hz a 1 s cadence fires on every 10th sample even when that
    sample is a millisecond early. A clock that steps backwards makes the metric due at once.

    Args:
        interval: seconds between reads (>= 0; 0 = every sample).
        slack: seconds early a read may still count as due (use a fraction of the sample
            interval).
    """

    __slots__ = ("interval", "slack", "last")

    def __init__(self, interval: float, slack: float = 0.0) -> None:
        if interval < 0:
            raise ValueError(f"a cadence must be >= 0 seconds, got {interval!r}; try 1.0")
        self.interval = float(interval)
        self.slack = float(slack)
        self.last: float | None = None

    def due(self, now: float) -> bool:
        """True when the metric should be read at ``now`` (it is not marked read: see ``done``)."""
        last = self.last
        return last is None or now < last or now - last >= self.interval - self.slack

    def done(self, now: float) -> None:
        """Record a successful read at ``now`` (a failed read stays due and is retried)."""
        self.last = now

    def overdue_by(self, now: float) -> float:
        """Seconds past due (infinite when never read): ranks which due metric goes first."""
        return float("inf") if self.last is None else now - self.last - self.interval
