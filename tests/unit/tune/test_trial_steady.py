"""A tuner trial is measured with the one step-statistics module (analysis/steps.py), whether it
runs a target's engine steps or a script: its own warm-up dropped, medians and throughput as
``run`` quotes them."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpudoctor.analysis import steps as step_stats
from gpudoctor.analysis.steps import stats_past_warmup
from gpudoctor.records.step import StepRecord
from gpudoctor.records.tune import TrialVerdict

HERE = Path(__file__).parent


def _steps() -> list[StepRecord]:
    # 4 slow warm-up steps, then steps alternating 10 and 30 ms (a loader stalling every other
    # step), batch 32, data waits of 1 and 5 ms
    times = [200.0, 150.0, 80.0, 40.0] + [10.0, 30.0] * 6
    waits = [50.0] * 4 + [1.0, 5.0] * 6
    return [StepRecord(rank=0, step=i, t_end_s=float(i), step_ms=t, data_wait_ms=w, samples=32)
            for i, (t, w) in enumerate(zip(times, waits))]


def test_the_trial_drops_its_own_warmup_and_counts_the_stalls() -> None:
    stats = stats_past_warmup(_steps(), warmup=4)
    assert stats.n_used == 12  # exactly the trial's warm-up dropped (no warm-up fraction on top)
    assert stats.mean_step_ms == 20.0 and stats.mean_data_wait_ms == 3.0
    assert stats.samples_per_s == 32 * 12 / (20.0 * 12 / 1000.0)  # the stalls count: 1,600/s
    assert stats.step_ms == 20.0  # the median, for comparison: (10 + 30) / 2


def test_a_step_without_a_batch_size_gives_no_samples_rate() -> None:
    steps = _steps()
    steps[-1] = StepRecord(rank=0, step=15, t_end_s=15.0, step_ms=30.0, samples=None)
    stats = stats_past_warmup(steps, warmup=4)
    assert stats.samples_per_s is None and stats.throughput[1] == "steps/s"


def test_steps_are_taken_in_step_order_and_one_is_kept_past_a_long_warmup() -> None:
    steps = _steps()
    assert stats_past_warmup(list(reversed(steps)), warmup=4).step_ms == 20.0
    only_last = stats_past_warmup(steps, warmup=len(steps))
    assert only_last.n_used == 1 and only_last.step_ms == 30.0
    assert stats_past_warmup([], warmup=4) is None


def test_an_engine_trial_quotes_the_shared_medians(monkeypatch: pytest.MonkeyPatch) -> None:
    """tune/trials.py takes its step time and data wait from stats_past_warmup, not a slice of its own."""
    import torch

    from gpudoctor.tune import trials
    from gpudoctor.tune.session import TuneContext, TuneOptions
    from gpudoctor.tune.target import load_target

    seen = []

    def spy(records, warmup):
        seen.append((len(records), warmup, step_stats.stats_past_warmup(records, warmup)))
        return seen[-1][2]

    monkeypatch.setattr(trials, "stats_past_warmup", spy)
    ref = f"{HERE / 'tiny_target.py'}:target"
    target = load_target(ref)
    ctx = TuneContext(target, trials.TrialRunner(target, ref), TuneOptions(steps=4, warmup=2, window_s=0.0),
                      device=torch.device("cpu"))
    trial = ctx.runner.run(ctx.spec("batch", "batch=16", {}, batch_size=16))
    assert trial.verdict is TrialVerdict.OK, trial.reason
    [(n, warmup, stats)] = seen
    assert (n, warmup, stats.n_used) == (6, 2, 4)
    assert stats.gpu_ms is None  # on the CPU: the host's median step is the trial's step
    assert trial.step_ms == stats.step_ms and trial.data_wait_ms == stats.data_wait_ms
    assert trial.samples_per_s == pytest.approx(16 * 1e3 / stats.step_ms)
