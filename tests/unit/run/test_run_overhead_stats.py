"""The statistics of ``bench/run_overhead.py``: bar figures unchanged, spread and splits added."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[3] / "bench" / "run_overhead.py"


@pytest.fixture(scope="module")
def bench():
    spec = importlib.util.spec_from_file_location("run_overhead_bench", BENCH)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _times(before: float, after: float, window: float = 50.0) -> dict:
    # steps 0-4 warm-up, 5-9 before the window, 10-15 excluded, 16-59 after it
    gpu = [100.0] * 5 + [before] * 5 + [window] * 6 + [after] * 44
    return {"gpu_ms": gpu, "wall_ms": [x / 2 for x in gpu]}


def test_figures_split_before_and_after_the_window(bench) -> None:
    fig = bench._figures(_times(before=10.0, after=20.0))
    assert fig["before_window_mean_gpu_ms"] == 10.0 and fig["after_window_mean_gpu_ms"] == 20.0
    assert fig["outside_mean_gpu_ms"] == pytest.approx((5 * 10.0 + 44 * 20.0) / 49)
    assert fig["whole_total_gpu_ms"] == 4 * 100.0 + 5 * 10.0 + 6 * 50.0 + 44 * 20.0
    assert len(fig["per_step_gpu_ms"]) == 60


def test_summary_pairs_rounds_and_reports_the_noise_floor(bench) -> None:
    runs = []
    for r, plain in enumerate((20.0, 20.2, 19.8)):
        runs.append({"mode": "plain", "round": r, **bench._figures(_times(plain, plain))})
        runs.append({"mode": "instrumented", "round": r, **bench._figures(_times(plain * 1.04, plain * 1.01))})
        runs.append({"mode": "probes", "round": r, **bench._figures(_times(plain, plain * 1.005))})
    stats = bench.summarize(runs)
    plain_outside = stats["arms"]["plain"]["outside_mean_gpu_ms"]
    assert (plain_outside["min"], plain_outside["median"], plain_outside["max"]) == pytest.approx((19.8, 20.0, 20.2))
    assert stats["noise_floor_plain_range_over_median"]["outside_mean_gpu_ms"] == pytest.approx(0.02)
    inst = stats["overheads"]["instrumented"]
    assert inst["before_window_mean_gpu_ms"]["paired_per_round"] == pytest.approx([0.04] * 3, abs=1e-5)
    assert inst["after_window_mean_gpu_ms"]["paired_median"] == pytest.approx(0.01)
    # the bar's figure is still the ratio of the medians over rounds
    expected = (5 * 1.04 + 44 * 1.01) / 49 - 1
    assert inst["outside_mean_gpu_ms"]["ratio_of_medians"] == pytest.approx(expected)
    assert stats["overheads"]["probes"]["after_window_mean_gpu_ms"]["paired_max"] == pytest.approx(0.005)
    lines = bench.spread_lines(stats)
    assert lines[0] == "noise floor (plain runs, outside mean, CUDA events): range 2.00% of median"
    assert any(line.startswith("probes") and "after_window_mean_gpu_ms" in line and "+0.50%" in line for line in lines)
