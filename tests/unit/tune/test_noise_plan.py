"""The pure parts of deciding above the noise and of the budget plan."""

from __future__ import annotations

import pytest

from gpudoctor.tune import plan
from gpudoctor.tune.noise import NOISY, beats, compare, pick, summarize, too_noisy
from gpudoctor.tune.session import DEFAULT_BUDGET_S


def test_spread_and_a_failed_run() -> None:
    m = summarize([98.0, 100.0, 102.0])
    assert m is not None and m.median == 100.0 and m.spread == pytest.approx(0.02)
    assert summarize([100.0, None]) is None and summarize([]) is None


def test_paired_rounds_survive_one_disturbed_round() -> None:
    start = summarize([100.0, 100.0, 30.0])  # round 3 disturbed for both arms alike
    tuned = summarize([150.0, 152.0, 45.0])
    gain, margin = compare(tuned, start, 0.03)
    assert gain == pytest.approx(1.5, rel=0.02) and margin < 0.05 and beats(tuned, start, 0.03)


def test_a_winner_inside_the_noise_keeps_the_start() -> None:
    start, other = summarize([100.0, 104.0]), summarize([103.0, 105.0])
    won, why = pick([start, other], base=0, tolerance=0.03)
    assert won == 0 and "inside the noise" in why


def test_the_cheapest_of_the_real_winners_wins() -> None:
    fp32, tf32, bf16, fp16 = (summarize(r) for r in ([100.0, 101.0], [150.0, 151.0], [200.0, 202.0], [203.0, 204.0]))
    won, why = pick([fp32, tf32, bf16, fp16], base=0, tolerance=0.03)
    assert won == 2 and "beyond" in why  # fp16 is not faster than bf16 beyond the noise


def test_plan_cuts_the_lowest_value_stages_and_names_their_need() -> None:
    p = plan.make_plan(["precision", "batch", "loader", "scaler"], 60.0, step_s=0.1, setup_s=1.0, warmup=5,
                       steps=10, repeats=2, cuda=True)
    cut = [s for s in p.stages if s.cut]
    assert cut and all(s.need_s > 0 for s in cut)
    lines = "\n".join(p.lines())
    assert "cut" in lines and "needs ~" in lines
    assert {s.name for s in cut} >= {"precision", "loader"}  # each named with its need
    assert all(s.given_s >= s.need_s for s in p.stages if not s.cut)  # a kept stage gets at least its need


def test_compile_is_cut_before_the_precision_stage() -> None:
    full = plan.make_plan(["precision"], None, step_s=0.05, setup_s=1.0, warmup=5, steps=20, repeats=2, cuda=True)
    need = full.stages[0].need_s
    p = plan.make_plan(["precision"], need - plan.COMPILE_S + plan.confirm_need(1.0), step_s=0.05, setup_s=1.0,
                       warmup=5, steps=20, repeats=2, cuda=True)
    assert p.compile_cut and not p.stages[0].cut


@pytest.mark.parametrize("name, step_s, setup_s", [
    # estimates, not measurements: the engine's default dtype (auto) is bf16 on an H200; ResNet-50 160 px at
    # batch 256 (8,278 samples/s in issue 17: 31 ms a step) and GPT-2 124M at 16 x 1024 tokens (~60 ms a
    # step, assumed); set-up 3 s a trial (model build, cuDNN autotuning)
    ("resnet50", 0.031, 3.0), ("gpt124m", 0.06, 3.0)])
def test_default_budget_holds_tune_all_by_the_plan(name: str, step_s: float, setup_s: float) -> None:
    steps = max(10, int(1.0 / step_s) + 1)
    p = plan.make_plan(list(plan.VALUE_ORDER), DEFAULT_BUDGET_S, step_s=step_s, setup_s=setup_s, warmup=5,
                       steps=steps, repeats=2, cuda=True, spent_s=setup_s + 15 * step_s)
    assert not [s.name for s in p.stages if s.cut and s.name != "ddp"], p.lines()
    assert not p.compile_cut, p.lines()


def test_too_noisy_names_the_band_and_what_to_do_only_beyond_the_threshold() -> None:
    assert too_noisy(0.03) == "" and too_noisy(NOISY) == ""  # a quiet machine: the verdict stands alone
    words = too_noisy(12.77)  # what a busy shared 2-core box measured
    assert "too noisy to confirm" in words and "+-1277%" in words
    assert "nothing else is using its CPUs and GPU" in words and "--window-s" in words


def _three(budget_s: float, **kw) -> "plan.Plan":
    return plan.make_plan(["precision", "batch", "loader"], budget_s, step_s=0.03, setup_s=14.5, warmup=5, steps=34,
                          repeats=2, cuda=True, compile_trial=False, spent_s=15.0, **kw)


def test_replan_gives_the_time_an_early_stage_left_to_a_cut_one() -> None:
    first = _three(420.0)
    assert first.stage("loader").cut and not first.stage("precision").cut  # sized from a 14.5 s set-up
    # precision finished in 101 s (issue 17, ResNet-50 on an H200), its trials took ~3 s of set-up each
    again = plan.replan(first, ["batch", "loader"], elapsed_s=130.0, setup_s=3.0)
    assert not again.stage("batch").cut and not again.stage("loader").cut, again.lines()
    assert again.stage("precision") == first.stage("precision")  # a stage already run keeps its entry
    assert again.confirm_s < first.confirm_s  # the confirmation re-sized from the measured set-up
    # no time freed: what did not fit still does not
    assert plan.replan(first, ["batch", "loader"], elapsed_s=400.0).stage("loader").cut


def test_a_loader_bound_plan_keeps_the_loader_before_the_other_stages() -> None:
    need = {s.name: s.need_s for s in _three(None).stages}
    # the loader's pairs run `repeats` times each: at a 14.5 s set-up a trial it needs the most
    assert need["loader"] > need["precision"] > need["batch"]
    budget = 15.0 + plan.confirm_need(14.5) + need["loader"] + 1.0  # room for the loader, or for precision
    bound, free = _three(budget, loader_bound=True), _three(budget)
    assert not bound.stage("loader").cut and bound.stage("precision").cut and bound.stage("batch").cut
    assert free.stage("loader").cut and not free.stage("precision").cut  # the usual order keeps precision
    assert plan.replan(bound, ["batch", "loader"], elapsed_s=15.0).value_order == plan.LOADER_BOUND_ORDER
