"""The thread both samplers share (collectors/periodic.py): schedule, callback errors, start/stop."""

from __future__ import annotations

import pytest

from gpudoctor.collectors.host import HostSampler
from gpudoctor.collectors.nvml import GpuSampler
from gpudoctor.collectors.periodic import PeriodicSampler


class Counter(PeriodicSampler[float]):
    """Samples its simulated clock; ``ready`` plays ``available``."""

    def __init__(self, *, at_start: bool, ready: bool = True, on_sample=None) -> None:
        self.now = 0.0
        super().__init__(0.1, on_sample, 10, hint=0.1, monotonic=lambda: self.now)
        self.sample_at_start = at_start
        self.available = ready
        self.stamps: list[float] = []

    def sample_once(self) -> float:
        self.stamps.append(round(self.now, 6))
        self._deliver(self.now)
        return self.now


def run_for(sampler: Counter, seconds: float) -> None:
    def wait(pause: float) -> bool:
        sampler.now += pause
        return sampler.now >= seconds - 1e-9

    sampler._loop(wait)


@pytest.mark.parametrize("at_start, first", [(True, 0.0), (False, 0.1)])
def test_the_loop_samples_on_the_grid_first_at_start_or_one_interval_later(at_start, first):
    s = Counter(at_start=at_start)
    run_for(s, 0.55)
    assert s.stamps[0] == first and s.stamps[-1] == 0.5
    assert all(b - a == pytest.approx(0.1) for a, b in zip(s.stamps, s.stamps[1:]))


def test_a_failing_callback_is_kept_not_raised():
    def fail(_):
        raise OSError("disk full")

    s = Counter(at_start=True, on_sample=fail)
    run_for(s, 0.25)
    assert len(s.stamps) == 3 and isinstance(s.last_error, OSError)


def test_an_unavailable_sampler_starts_no_thread_and_stops_cleanly():
    with Counter(at_start=True, ready=False) as s:
        assert s._thread is None
    assert s.stamps == []


def test_both_samplers_validate_alike():
    for cls, hint in ((GpuSampler, "0.2"), (HostSampler, "0.5")):
        with pytest.raises(ValueError, match=f"interval must be > 0 seconds, got 0; try {hint}"):
            cls(interval=0)
        with pytest.raises(ValueError, match="maxlen must be at least 1"):
            cls(maxlen=0)
