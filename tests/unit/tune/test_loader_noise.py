"""The loader knob decides above the noise: the sweep's pick is checked against the next cheaper
worker count, and prefetch_factor / forkserver are each run ``repeats`` times against the cheaper
arm, interleaved, and kept only when faster beyond the noise (round by round, as precision does).

The loader trials' figures are a known model (no trial runs: the decisions are asserted on fixed
rates, never on a shared box's load); the epoch-start waits are measured for real."""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import pytest
import torch

import gpudoctor.tune.loader as loader_knob
from gpudoctor.records.tune import Trial, TrialVerdict
from gpudoctor.tune import session
from gpudoctor.tune.session import TuneContext, TuneOptions
from gpudoctor.tune.target import load_target
from gpudoctor.tune.trials import TrialRunner

HERE = Path(__file__).parent
REF = f"{HERE / 'tiny_target.py'}:target"
GPU_RATE = 5000.0  # the consumption rate the loader aims for (data already on the device)


def _run_loader(monkeypatch: pytest.MonkeyPatch, rate: Callable[[dict, int, int], float], *, counts: list[int],
                start_workers: int = 0, repeats: int = 2) -> tuple[session.KnobResult, list]:
    """``tune_loader`` with the sweep over ``counts`` and each loader run's samples/s given by
    ``rate(loader settings, nth run of these settings, index of the run)``; returns the result and
    the specs run."""
    specs: list = []
    runs: Counter = Counter()

    def run(self: TrialRunner, spec) -> Trial:
        specs.append(spec)
        key = tuple(sorted(spec.loader.items()))
        runs[key] += 1
        value = rate(spec.loader, runs[key], len(specs) - 1)
        trial = Trial(knob=spec.knob, setting=spec.setting, params=spec.params, verdict=TrialVerdict.OK,
                      steps=spec.warmup + spec.steps, samples_per_s=value, step_ms=1e3 * spec.batch_size / value,
                      wall_s=0.01)
        self.on_trial(trial)
        return trial

    monkeypatch.setattr(session.TrialRunner, "run", run)
    monkeypatch.setattr(loader_knob, "worker_counts", lambda most: counts)
    target = load_target(REF)
    target = dataclasses.replace(target, loader=target.loader.replace(num_workers=start_workers))
    ctx = TuneContext(target, TrialRunner(target, REF, isolation="inline"),
                      TuneOptions(steps=2, warmup=1, window_s=0.0, repeats=repeats, budget_s=None),
                      device=torch.device("cpu"))
    ctx.consumption_rate = GPU_RATE
    return loader_knob.tune_loader(ctx), specs


def _settings(loader: dict) -> tuple[int, int, str | None]:
    return loader["num_workers"], loader["prefetch_factor"], loader["multiprocessing_context"]


def test_a_worker_count_faster_only_inside_the_noise_is_not_kept(monkeypatch: pytest.MonkeyPatch) -> None:
    """What an H200 showed (one run of 8 workers 6,110 samples/s, another 5,632): a lucky single
    run makes the sweep pick 2 workers; 2 against 1, run twice each, is 1.01x: 1 worker stays."""

    def rate(loader: dict, nth: int, call: int) -> float:
        workers, prefetch, context = _settings(loader)
        if workers == 2 and nth == 1:
            return 2400.0  # the sweep's one run of 2 workers: lucky
        return {0: 1000.0, 1: 2000.0, 2: 2020.0}[workers] * (1.01 if prefetch == 4 or context else 1.0)

    result, specs = _run_loader(monkeypatch, rate, counts=[0, 1, 2])
    assert result.params["num_workers"] == 1, result.notes
    check = next(n for n in result.notes if n.startswith("2 workers against 1 (the sweep picked 2)"))
    assert "1.01x round by round" in check and check.endswith("not kept"), check
    # prefetch_factor 4 and forkserver workers: 1.01x, inside the 3% tolerance: neither is kept
    assert result.params["prefetch_factor"] == 2 and result.params["multiprocessing_context"] is None
    assert any(n.startswith("prefetch_factor 4 against 2") and n.endswith("not kept") for n in result.notes)
    assert any(n.startswith("forkserver workers against") and n.endswith("not kept") for n in result.notes)
    # every pair ran both arms twice, interleaved (round 2 starts with the other arm)
    paired = [s.setting for s in specs if "prefetch_factor=" in s.setting]
    assert paired == ["num_workers=1 prefetch_factor=2", "num_workers=1 prefetch_factor=4",
                      "num_workers=1 prefetch_factor=4", "num_workers=1 prefetch_factor=2"]


def test_arms_faster_beyond_the_noise_are_kept_and_every_row_shows_its_spread(
        monkeypatch: pytest.MonkeyPatch) -> None:
    def rate(loader: dict, nth: int, call: int) -> float:
        # the sweep runs 2, 1 and 0 workers (0 no longer keeps up); then each pair's 2 rounds of 2
        # runs, the second round 10% slower for both arms alike (the machine drifted): the spread
        # of each arm is +-5.3%, the round-by-round ratio does not move
        drift = 0.9 if call >= 3 and (call - 3) // 2 % 2 == 1 else 1.0
        workers, prefetch, context = _settings(loader)
        base = {0: 1000.0, 1: 2000.0, 2: 2020.0}[workers]
        return base * (1.2 if prefetch == 4 else 1.0) * (1.2 if context == "forkserver" else 1.0) * drift

    result, specs = _run_loader(monkeypatch, rate, counts=[0, 1, 2])
    assert result.params["num_workers"] == 1  # the sweep's pick, 2x the 0 workers it was checked against
    assert any(n.startswith("1 worker against 0") and n.endswith(": kept") for n in result.notes), result.notes
    assert result.params["prefetch_factor"] == 4 and result.params["multiprocessing_context"] == "forkserver"
    prefetch = next(n for n in result.notes if n.startswith("prefetch_factor 4 against 2"))
    assert "1.20x round by round (noise ±3%)" in prefetch and prefetch.endswith(": kept"), prefetch
    # (c) every repeated loader row carries its runs and their spread; the sweep's single runs none
    rows = [t for t in result.trials if t.samples_per_s is not None]
    sweep, repeated = rows[:3], rows[3:]
    assert [t.setting for t in sweep] == ["num_workers=2", "num_workers=1", "num_workers=0"]
    assert all(not t.rates and t.spread is None for t in sweep)  # one run each: no spread to show
    assert len(repeated) == 6 and all(len(t.rates) == 2 and t.spread == pytest.approx(0.1 / 1.9)
                                      for t in repeated), [(t.setting, t.rates, t.spread) for t in repeated]
    assert result.winner == "num_workers=1 prefetch_factor=4 forkserver=on"
    assert f"±{0.1 / 1.9:.1%} over 2 runs" in result.summary, result.summary
    epoch = next(n for n in result.notes if n.startswith("first batch of an epoch (median of 2)"))
    assert "ms ±" in epoch


def test_the_check_partner_is_the_next_cheaper_count_or_the_start() -> None:
    counts = [0, 1, 2, 4, 8, 15]
    assert loader_knob.partner_count(8, counts, start=0) == 4
    assert loader_knob.partner_count(8, counts, start=6) == 6  # the user's own count, when cheaper and closer
    assert loader_knob.partner_count(0, counts, start=4) == 4  # nothing cheaper: the start, checked as the dearer
    assert loader_knob.partner_count(0, counts, start=0) is None


def test_one_repeat_still_decides_by_the_tolerance(monkeypatch: pytest.MonkeyPatch) -> None:
    """``--repeats 1``: one run per arm, no spread; the tolerance alone is the noise band."""

    def rate(loader: dict, nth: int, call: int) -> float:
        workers, prefetch, _ = _settings(loader)
        return {0: 1000.0, 1: 2000.0}[workers] * (1.02 if prefetch == 4 else 1.0)

    result, _ = _run_loader(monkeypatch, rate, counts=[0, 1], repeats=1)
    assert result.params["num_workers"] == 1 and result.params["prefetch_factor"] == 2
    assert "(one run)" in result.summary, result.summary


def test_the_plan_counts_every_repeated_arm_of_the_loader_stage() -> None:
    from gpudoctor.tune import plan

    def need(repeats: int, cuda: bool) -> tuple[int, float]:
        return plan.stage_needs(["loader"], step_s=0.03, setup_s=1.0, warmup=5, steps=34, repeats=repeats, cuda=cuda,
                                world_size=1, compile_trial=False)["loader"]

    # the sweep's single runs, then 4 pairs (3 without CUDA: no pin_memory pair) of 2 arms x repeats
    assert need(2, True)[0] == plan.LOADER_SWEEP + 2 * 2 * 4 == 21
    assert need(3, True)[0] == 5 + 2 * 3 * 4 and need(2, False)[0] == 5 + 2 * 2 * 3
    trial = 1.0 + plan.LOADER_TRIAL_S
    assert need(2, True)[1] == pytest.approx(21 * trial + 2 * 2 * plan.EPOCH_START_S)
