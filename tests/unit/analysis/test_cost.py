"""The cost arithmetic (analysis/cost.py): per 1,000 steps, per epoch, a finding's waste and a
verified fix's saving, on hand-made runs whose figures are known exactly."""

from __future__ import annotations

import pytest

from gpudoctor.analysis.cost import run_cost, step_cost, steps_per_epoch, try_savings
from gpudoctor.analysis.facts import run_facts
from gpudoctor.analysis.thresholds import Thresholds
from gpudoctor.analysis.try_compare import TryComparison, judge
from gpudoctor.records.finding import Finding, Severity


def test_step_cost_is_time_times_gpus_times_price() -> None:
    # 1,000 steps of 3.6 s = 1 hour; on 8 GPUs at 2.5 per GPU-hour: 20
    assert step_cost(3600.0, 8, 2.5, 1000) == pytest.approx(20.0)
    assert step_cost(40.0, 1, 3.6, 1000) == pytest.approx(0.04)


@pytest.mark.parametrize(("kw", "expected"), [
    (dict(dataset_len=20000, batch_size=256, world_size=1, distributed_sampler=False), 79.0),
    (dict(dataset_len=20000, batch_size=256, world_size=1, distributed_sampler=False, drop_last=True), 78.0),
    (dict(dataset_len=20000, batch_size=256, world_size=2, distributed_sampler=True), 40.0),
    # two ranks without a DistributedSampler: each reads the whole dataset
    (dict(dataset_len=20000, batch_size=256, world_size=2, distributed_sampler=False), 79.0),
    # measured samples per optimizer step (gradient accumulation: 4 batches of 256)
    (dict(dataset_len=20000, batch_size=256, world_size=1, distributed_sampler=False,
          samples_per_step=1024.0), 20000 / 1024),
    (dict(dataset_len=None, batch_size=256, world_size=1, distributed_sampler=False), None),
    (dict(dataset_len=20000, batch_size=None, world_size=1, distributed_sampler=False), None),
])
def test_steps_per_epoch(kw, expected) -> None:
    assert steps_per_epoch(**kw) == (pytest.approx(expected) if expected is not None else None)


def _finding(code: str, gain: float | None) -> Finding:
    return Finding(code=code, severity=Severity.WARN, title=code, expected_gain=gain)


def test_run_cost_of_a_one_gpu_run(build) -> None:
    facts = run_facts(build.run(), Thresholds())  # 40 ms steps of 256 samples, 20,000 samples
    cost = run_cost(facts, [_finding("GD-A", 0.5), _finding("GD-B", None), _finding("GD-C", 0.0)], 3.6)
    assert cost.gpus == 1 and cost.mean_step_ms == pytest.approx(40.0)
    assert cost.per_1k_steps == pytest.approx(0.04)
    assert cost.steps_per_epoch == pytest.approx(20000 / 256)
    assert cost.per_epoch == pytest.approx(20000 / 256 * 0.04 / 1000)
    assert [f.code for f in cost.findings] == ["GD-A"]  # no gain, nothing wasted
    assert cost.findings[0].per_1k_steps == pytest.approx(0.02)
    assert cost.findings[0].per_epoch == pytest.approx(cost.per_epoch / 2)


def test_run_cost_bills_every_gpu_and_waits_for_the_slowest_rank(build) -> None:
    ddp = dict(world_size=2, loaders=(build.loader(sampler="DistributedSampler"),))
    run = build.run(steps_by_rank={0: build.steps(0), 1: build.steps(1, step_ms=50.0)},
                    configs={0: build.config(0, **ddp), 1: build.config(1, **ddp)},
                    windows={})
    cost = run_cost(run_facts(run, Thresholds()), [], 2.0)
    assert cost.gpus == 2 and cost.mean_step_ms == pytest.approx(50.0)
    assert cost.per_1k_steps == pytest.approx(1000 * 0.050 / 3600 * 2 * 2.0)
    assert cost.steps_per_epoch == pytest.approx(10000 / 256)  # half the dataset per rank


def test_run_cost_without_steps_or_dataset_length(build) -> None:
    assert run_cost(run_facts(build.run(steps_by_rank={}, windows={}), Thresholds()), [], 2.5) is None
    run = build.run(configs={0: build.config(loaders=(build.loader(dataset_len=None),))})
    cost = run_cost(run_facts(run, Thresholds()), [], 2.5)
    assert cost.per_1k_steps > 0 and cost.per_epoch is None and cost.steps_per_epoch is None
    with pytest.raises(ValueError):
        run_cost(run_facts(run, Thresholds()), [], -1.0)


def _comparison(before: list[float], after: list[float]) -> TryComparison:
    from gpudoctor.analysis.steps import median

    j = judge(before, after)
    return TryComparison(knobs=("num_workers=8",), unit="samples/s",
                         before={"throughput": median(before)}, after={"throughput": median(after)},
                         gain=j.gain, judgement=j)


def test_a_verified_fix_saves_its_share_of_the_time(build) -> None:
    cost = run_cost(run_facts(build.run(), Thresholds()), [], 3.6)
    saved = try_savings(cost, _comparison([100.0, 101.0], [200.0, 202.0]))
    # twice the throughput: the same work takes half the time
    assert saved.time_saved_share == pytest.approx(1 - 100.5 / 201.0)
    assert saved.per_1k_steps == pytest.approx(0.02)
    assert saved.per_epoch == pytest.approx(cost.per_epoch / 2)


def test_an_unverified_fix_saves_nothing(build) -> None:
    cost = run_cost(run_facts(build.run(), Thresholds()), [], 3.6)
    assert try_savings(cost, _comparison([100.0, 130.0], [110.0, 140.0])) is None  # within the noise
    assert try_savings(cost, _comparison([100.0, 101.0], [80.0, 81.0])) is None  # slower
