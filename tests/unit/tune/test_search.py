"""The pure search strategies on fake objectives: a known OOM boundary, caps, noisy throughput."""

from __future__ import annotations

import math
import random

import pytest

from gpudoctor.tune.search import grid, grow_then_bisect, knee, pick_cheapest


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
