"""The pure search strategies on fake objectives: a known OOM boundary, caps, noisy throughput."""

from __future__ import annotations

import math
import random

import pytest

from gpudoctor.tune.search import grid, grow_then_bisect, knee, linear_limit, narrow, pick_cheapest


@pytest.mark.parametrize("limit", [1, 7, 100, 777, 4096, 50_001])
@pytest.mark.parametrize("margin", [0.0, 0.05, 0.1])
def test_boundary_found_within_margin(limit: int, margin: float) -> None:
    calls: list[int] = []

    def fits(n: int) -> bool:
        calls.append(n)
        return n <= limit

    found = grow_then_bisect(fits, start=1, cap=1_000_000, margin=margin)
    assert found.largest_fit is not None
    assert limit * 0.99 - 1 <= found.largest_fit <= limit  # bisected to 1% resolution, never above
    assert found.smallest_fail is not None and found.smallest_fail > limit
    assert found.chosen == max(1, math.floor(found.largest_fit * (1 - margin)))
    assert found.chosen <= limit and found.chosen >= limit * (1 - margin) * 0.99 - 1
    assert [p.size for p in found.probes] == calls
    assert len(calls) <= 40


def test_cap_reached_without_failure_uses_the_cap_without_margin() -> None:
    found = grow_then_bisect(lambda n: True, start=16, cap=1000, margin=0.1)
    assert found.capped and found.largest_fit == 1000 and found.chosen == 1000 and found.smallest_fail is None
    assert [p.size for p in found.probes] == [16, 32, 64, 128, 256, 512, 1000]


def test_start_does_not_fit() -> None:
    found = grow_then_bisect(lambda n: n < 8, start=16, cap=1000)
    assert found.largest_fit is None and found.chosen is None and found.smallest_fail == 16


def test_non_monotone_boundary_still_bracketed() -> None:
    # 96 fails (an odd cuDNN workspace), everything else up to 120 fits: the answer must be a size
    # that was really seen to fit, below the first failure seen.
    found = grow_then_bisect(lambda n: n <= 120 and n != 96, start=1, cap=10_000, margin=0.0)
    assert found.largest_fit is not None and found.largest_fit != 96
    assert any(p.size == found.largest_fit and p.fits for p in found.probes)


@pytest.mark.parametrize("kwargs", [dict(start=0, cap=10), dict(start=5, cap=4), dict(start=1, cap=10, margin=1.0),
                                    dict(start=1, cap=10, factor=1.0)])
def test_bad_arguments(kwargs) -> None:
    with pytest.raises(ValueError):
        grow_then_bisect(lambda n: True, **kwargs)


def test_pick_cheapest_ignores_noise() -> None:
    rng = random.Random(0)
    # a plateau from the 3rd setting on, measured with +-1% noise: the first plateau setting wins
    true = [100.0, 180.0, 250.0, 252.0, 251.0, 253.0]
    for _ in range(50):
        noisy = [t * (1 + rng.uniform(-0.01, 0.01)) for t in true]
        assert pick_cheapest(noisy, tolerance=0.03) == 2


def test_pick_cheapest_skips_failed_and_takes_a_real_gain() -> None:
    assert pick_cheapest([None, 100.0, 150.0], tolerance=0.03) == 2
    assert pick_cheapest([None, None]) is None
    assert pick_cheapest([]) is None
    assert pick_cheapest([100.0, 0.0, 99.0]) == 0


def test_knee_where_the_curve_flattens() -> None:
    points = [(16, 1000.0), (32, 1900.0), (64, 3000.0), (128, 3900.0), (256, 4000.0), (512, 4050.0)]
    assert knee(points, tolerance=0.05) == 128
    assert knee([], tolerance=0.05) is None


def test_grid_lists_cheapest_first() -> None:
    assert grid({"w": [0, 2], "pin": [False, True]}) == [
        {"w": 0, "pin": False}, {"w": 0, "pin": True}, {"w": 2, "pin": False}, {"w": 2, "pin": True}]


# -- narrowing around a prediction (the memory model's guess of the limit)

def _probe(limit: int, calls: list[int]):
    def fits(n: int) -> bool:
        calls.append(n)
        return n <= limit
    return fits


@pytest.mark.parametrize("limit", [100, 777, 30_950, 50_001])
def test_narrow_with_a_right_guess_takes_two_probes(limit: int) -> None:
    calls: list[int] = []
    lo, hi = narrow(_probe(limit, calls), limit // 2, limit * 2, guess=limit)
    assert lo <= limit < hi and hi - lo <= max(1, math.floor(lo * 0.01))
    assert len(calls) == 2


@pytest.mark.parametrize("error", [-0.5, -0.1, -0.03, -0.005, 0.005, 0.03, 0.1, 0.6])
@pytest.mark.parametrize("limit", [100, 30_950])
def test_narrow_with_a_wrong_guess_is_still_right_and_bounded(limit: int, error: float) -> None:
    lo0, hi0 = limit // 2 + 1, limit * 2
    plain: list[int] = []
    narrow(_probe(limit, plain), lo0, hi0)
    calls: list[int] = []
    lo, hi = narrow(_probe(limit, calls), lo0, hi0, guess=int(limit * (1 + error)))
    assert lo <= limit < hi and hi - lo <= max(1, math.floor(lo * 0.01))  # the bracket is as tight as bisection's
    assert len(calls) <= 2 * len(plain) + 2  # a wrong guess costs probes, at most about twice bisection's


@pytest.mark.parametrize("guess", [None, 10, 50, 400, 10_000])
def test_narrow_ignores_a_guess_outside_the_bracket(guess) -> None:
    calls: list[int] = []
    lo, hi = narrow(_probe(123, calls), 50, 400, guess=guess)
    assert (lo, hi) == (123, 124)
    plain: list[int] = []
    narrow(_probe(123, plain), 50, 400)
    assert calls == plain


def test_narrow_respects_max_probes_and_bad_brackets() -> None:
    calls: list[int] = []
    narrow(_probe(30_950, calls), 1, 1 << 30, max_probes=3)
    assert len(calls) == 3
    with pytest.raises(ValueError):
        narrow(lambda n: True, 10, 10)


def test_grow_then_bisect_uses_the_prediction_once_bracketed() -> None:
    limit = 30_950
    asked: list[tuple[int, int]] = []

    def predict(lo: int, hi: int) -> int:
        asked.append((lo, hi))
        return limit

    plain = grow_then_bisect(lambda n: n <= limit, start=16, cap=65_535)
    guided = grow_then_bisect(lambda n: n <= limit, start=16, cap=65_535, predict=predict)
    assert asked == [(16_384, 32_768)]  # called once, with the bracket the first OOM made
    assert guided.largest_fit is not None and guided.largest_fit <= limit < guided.smallest_fail
    assert guided.smallest_fail - guided.largest_fit <= math.floor(guided.largest_fit * 0.01)
    assert len(guided.probes) == len(plain.probes) - 4  # 2 probes around the guess instead of 6 bisections


def test_grow_then_bisect_without_a_boundary_never_predicts() -> None:
    found = grow_then_bisect(lambda n: True, start=16, cap=1000, predict=lambda lo, hi: pytest.fail("asked"))
    assert found.capped


def test_linear_limit_from_peak_memory() -> None:
    # 1 GiB fixed (weights, workspaces) + 4 MiB per sample, 141 GiB usable: (141 - 1) GiB / 4 MiB = 35840
    mib = 2**20
    points = [(s, 1024 * mib + 4 * mib * s) for s in (16, 1024, 8192, 16384)]
    assert linear_limit(points, 141 * 1024 * mib) == 35_840
    assert linear_limit(points[:1], 141 * 1024 * mib) is None  # one point: no slope
    assert linear_limit([(8192, 5.0), (9000, 6.0)], 100.0) is None  # too close together: noise, not a slope
    assert linear_limit([(1000, 5.0), (4000, 5.0)], 100.0) is None  # memory not growing with the batch
    assert linear_limit([(1000, 5.0), (4000, 200.0)], 100.0) is None  # already over the capacity
    assert linear_limit(points, 0.0) is None
