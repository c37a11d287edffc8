"""The ddp knob's pure parts: the rotating round order and the per-arm medians it judges on."""

from __future__ import annotations

import pytest

from gpudoctor.tune.ddp import arm_medians, rotated
from gpudoctor.tune.search import pick_cheapest


def test_each_arm_leads_one_round_in_turn() -> None:
    arms = ("none", "fp16", "bf16")
    orders = [rotated(arms, r) for r in range(3)]
    assert orders == [["none", "fp16", "bf16"], ["fp16", "bf16", "none"], ["bf16", "none", "fp16"]]
    assert [o[0] for o in orders] == list(arms)


def test_medians_judge_the_arms_and_a_failed_round_fails_the_arm() -> None:
    assert arm_medians([[10.0, 12.0, 11.0], [20.0, None, 21.0], []]) == [11.0, None, None]


def test_one_lucky_run_does_not_win() -> None:
    # what happened on 2 x H200 at batch 128/rank: single runs put no hook ahead, the
    # interleaved rounds show fp16 about 6% faster
    none = [20_600.0, 19_400.0, 19_300.0]  # one lucky first run
    fp16 = [20_500.0, 20_700.0, 20_600.0]
    bf16 = [18_900.0, 19_000.0, 18_800.0]
    assert pick_cheapest([none[0], fp16[0], bf16[0]]) == 0
    assert pick_cheapest(arm_medians([none, fp16, bf16])) == 1
    assert arm_medians([none])[0] == pytest.approx(19_400.0)
