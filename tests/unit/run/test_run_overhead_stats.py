"""The statistics of ``benchmarks/run_overhead.py``: per-arm layouts, same-step comparisons, spread."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[3] / "benchmarks" / "run_overhead.py"


@pytest.fixture(scope="module")
def bench():
    spec = importlib.util.spec_from_file_location("run_overhead_bench", BENCH)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _early(before: float, after: float, window: float = 50.0) -> dict:
    # steps 0-4 warm-up, 5-9 before the window, 10-15 the window and the step after, 16-59 after it
    gpu = [100.0] * 5 + [before] * 5 + [window] * 6 + [after] * 44
    return {"per_step_gpu_ms": gpu, "per_step_wall_ms": [x / 2 for x in gpu]}


def _late(outside: float, window: float = 50.0) -> dict:
    # steps 0-4 warm-up, 5-54 outside, 55-59 the window (the default --steps 60 layout)
    gpu = [100.0] * 5 + [outside] * 50 + [window] * 5
    return {"per_step_gpu_ms": gpu, "per_step_wall_ms": [x / 2 for x in gpu]}


def test_layouts_follow_the_product(bench) -> None:
    assert bench.arm_window("instrumented", 60) == (55, 59)  # gpudoctor run --steps 60
    assert bench.arm_window("full_layout", 60) == (10, 14)  # gpudoctor run --full
    assert bench.arm_window("probes", 60) is None
    assert bench.arm_flags("instrumented", 60) == ["--full", "--window", "55:59"]


def test_figures_leave_out_warmup_window_and_the_step_after(bench) -> None:
    t = _early(before=10.0, after=20.0)
    fig = bench.figures({"gpu_ms": t["per_step_gpu_ms"], "wall_ms": t["per_step_wall_ms"]}, (10, 14))
    assert fig["before_window_mean_gpu_ms"] == 10.0 and fig["after_window_mean_gpu_ms"] == 20.0
    assert fig["outside_mean_gpu_ms"] == pytest.approx((5 * 10.0 + 44 * 20.0) / 49)
    assert fig["whole_total_gpu_ms"] == 4 * 100.0 + 5 * 10.0 + 6 * 50.0 + 44 * 20.0
    late = _late(outside=20.0)
    fig = bench.figures({"gpu_ms": late["per_step_gpu_ms"], "wall_ms": late["per_step_wall_ms"]}, (55, 59))
    assert fig["outside_mean_gpu_ms"] == 20.0 and fig["after_window_mean_gpu_ms"] is None


def test_summary_compares_each_arm_with_plain_over_the_same_steps(bench) -> None:
    runs = []
    for r, plain in enumerate((20.0, 20.2, 19.8)):
        # the plain run is slow where the early window sits: an arm must be compared on its own steps
        base = _early(plain, plain, window=plain)
        base["per_step_gpu_ms"][55:60] = [plain * 2] * 5
        runs.append({"mode": "plain", "round": r, **base})
        runs.append({"mode": "instrumented", "round": r, **_late(plain * 1.01, window=plain * 3)})
        runs.append({"mode": "full_layout", "round": r, **_early(plain * 1.04, plain * 1.01)})
        runs.append({"mode": "probes", "round": r, **_early(plain, plain * 1.005, window=plain * 1.005)})
    stats = bench.summarize(runs, 60)
    plain_outside = stats["arms"]["plain"]["outside_mean_gpu_ms"]
    # plain's own figures: no window, so only the warm-up is left out (5 slow steps of 55)
    assert (plain_outside["min"], plain_outside["median"], plain_outside["max"]) == pytest.approx(
        tuple(p * 60 / 55 for p in (19.8, 20.0, 20.2)))
    assert stats["noise_floor_plain_range_over_median"]["outside_mean_gpu_ms"] == pytest.approx(0.02)
    assert stats["layouts"]["instrumented"]["window"] == [55, 59]
    # the bar arm: steps 5-54 of both; plain's slow 55-59 are left out of both
    inst = stats["overheads"]["instrumented"]
    assert inst["outside_mean_gpu_ms"]["ratio_of_medians"] == pytest.approx(0.01)
    assert inst["outside_mean_gpu_ms"]["paired_per_round"] == pytest.approx([0.01] * 3, abs=1e-5)
    early = stats["overheads"]["full_layout"]
    assert early["before_window_mean_gpu_ms"]["paired_per_round"] == pytest.approx([0.04] * 3, abs=1e-5)
    # after the early window, plain's slow steps 55-59 are compared too: 44 x 1.01 vs 39 x 1 + 5 x 2
    assert early["after_window_mean_gpu_ms"]["paired_median"] == pytest.approx(44 * 1.01 / 49 - 1, abs=1e-5)
    expected = (5 * 1.04 + 44 * 1.01) / (5 + 39 + 10)
    assert early["outside_mean_gpu_ms"]["ratio_of_medians"] == pytest.approx(expected - 1, abs=1e-4)
    # no window: only the warm-up is left out
    assert stats["layouts"]["probes"]["left_out_of_outside"] == [0, 1, 2, 3, 4]
    lines = bench.spread_lines(stats)
    assert lines[0] == "noise floor (plain runs, outside mean, CUDA events): range 2.00% of median"
    assert any(line.startswith("instrumented (window 55-59) outside_mean_gpu_ms") and "+1.00%" in line
               for line in lines)
