"""``tune`` on a script measures a trial with the one step-statistics module (analysis/steps.py):
its own warm-up dropped, throughput = samples over the steady steps' total time, as ``run``."""

from __future__ import annotations

from gpudoctor.records.step import StepRecord
from gpudoctor.tune.script import steady_stats


def _steps() -> list[StepRecord]:
    # 4 slow warm-up steps, then steps alternating 10 and 30 ms (a loader stalling every other
    # step), batch 32, data waits of 1 and 5 ms
    times = [200.0, 150.0, 80.0, 40.0] + [10.0, 30.0] * 6
    waits = [50.0] * 4 + [1.0, 5.0] * 6
    return [StepRecord(rank=0, step=i, t_end_s=float(i), step_ms=t, data_wait_ms=w, samples=32)
            for i, (t, w) in enumerate(zip(times, waits))]


def test_the_trial_drops_its_own_warmup_and_counts_the_stalls() -> None:
    stats = steady_stats(_steps(), warmup=4)
    assert stats.n_used == 12  # exactly the trial's warm-up dropped (no warm-up fraction on top)
    assert stats.mean_step_ms == 20.0 and stats.mean_data_wait_ms == 3.0
    assert stats.samples_per_s == 32 * 12 / (20.0 * 12 / 1000.0)  # the stalls count: 1,600/s
    assert stats.step_ms == 20.0  # the median, for comparison: (10 + 30) / 2


def test_a_step_without_a_batch_size_gives_no_samples_rate() -> None:
    steps = _steps()
    steps[-1] = StepRecord(rank=0, step=15, t_end_s=15.0, step_ms=30.0, samples=None)
    stats = steady_stats(steps, warmup=4)
    assert stats.samples_per_s is None and stats.throughput[1] == "steps/s"
