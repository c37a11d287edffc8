"""Step statistics: medians, least squares, warm-up exclusion, per-rank stats, GPU summaries."""

from __future__ import annotations

import pytest

from gpudoctor.analysis.steps import least_squares, median, rank_step_stats, steady_steps
from gpudoctor.analysis.thresholds import Thresholds
from gpudoctor.analysis.utilization import summarize_gpus


def test_median_odd_even_empty():
    assert median([3.0, 1.0, 2.0]) == 2.0
    assert median([4.0, 1.0, 2.0, 3.0]) == 2.5
    assert median([]) is None


def test_least_squares_exact_line_and_noise():
    fit = least_squares([0, 1, 2, 3], [1.0, 3.0, 5.0, 7.0])
    assert (fit.slope, fit.intercept, fit.r2) == (2.0, 1.0, 1.0)
    noisy = least_squares([0, 1, 2, 3], [0.0, 1.0, 0.0, 1.0])
    assert noisy.slope == pytest.approx(0.2)
    assert noisy.r2 == pytest.approx(0.2)
    assert least_squares([1, 1, 1], [1, 2, 3]) is None
    assert least_squares([0, 1], [0, 1]) is None
    assert least_squares([0, 1, 2], [5, 5, 5]).r2 == 1.0


def test_steady_steps_drop_warmup(build):
    th = Thresholds()
    assert [s.step for s in steady_steps(build.steps(n=30), th)][0] == 5
    # 10% of 100 steps is more than 5: the larger drop wins
    assert steady_steps(build.steps(n=100), th)[0].step == 10
    # a short run keeps its last min_steps
    assert [s.step for s in steady_steps(build.steps(n=6), th)] == [3, 4, 5]
    assert len(steady_steps(build.steps(n=2), th)) == 2


def test_rank_stats_medians_shares_and_warmup_excluded(build):
    # the first 5 steps are 10x slower (warm-up): they must not move the medians
    steps = build.steps(n=30, step_ms=lambda i: 400.0 if i < 5 else 40.0,
                        data_wait_ms=lambda i: 100.0 if i < 5 else 10.0, samples=256)
    s = rank_step_stats(steps, Thresholds())
    assert (s.n_total, s.n_used, s.step_ms, s.data_wait_ms) == (30, 25, 40.0, 10.0)
    assert s.data_wait_share == 0.25
    assert s.gpu_share == 0.95
    assert s.samples_per_s == 6400.0
    assert rank_step_stats([], Thresholds()) is None


def test_rank_stats_leak_retries_nonfinite_scaler(build):
    steps = build.steps(
        n=30,
        mem=lambda i: build.mem(allocated=build.GIB + i * 4 * build.MIB, retries=i),
        loss_finite=lambda i: i < 7,
        scaler_scale=lambda i: 2.0 ** (20 - i),
        scaler_skipped=lambda i: i % 2 == 0,
    )
    s = rank_step_stats(steps, Thresholds())
    assert s.leak.slope == 4 * build.MIB and s.leak.r2 == 1.0
    assert s.alloc_first_bytes == build.GIB + 5 * 4 * build.MIB
    assert s.alloc_retries == 25  # 29 at the end minus 4 before the steady steps
    assert s.nonfinite_steps == tuple(range(7, 30))
    assert s.scaler_scales[0] == 2.0**15 and len(s.scaler_scales) == 25
    assert s.scaler_skips == 12  # even steps among 5..29: 6, 8, ..., 28


def test_unmeasured_fields_stay_none(build):
    s = rank_step_stats(build.steps(h2d_ms=None, gpu_ms=None, mem=None, samples=None), Thresholds())
    assert (s.h2d_ms, s.gpu_ms, s.gpu_share, s.leak, s.samples_per_s) == (None, None, None, None, None)
    assert s.h2d_share == 0.0


def test_profiler_window_steps_are_excluded(build):
    steps = build.steps(n=30, step_ms=lambda i: 100.0 if 10 <= i <= 14 else 40.0)
    s = rank_step_stats(steps, Thresholds(), exclude=(10, 14))
    assert (s.n_used, s.step_ms) == (20, 40.0)
    assert [x.step for x in steady_steps(steps, Thresholds(), (10, 14))][:6] == [5, 6, 7, 8, 9, 15]


def test_gpu_summary(build):
    samples = build.gpu_samples(n=4, util_gpu_pct=50.0) + build.gpu_samples(
        n=2, index=1, pids=(), util_gpu_pct=None, power_w=None)
    g0, g1 = summarize_gpus(samples)
    assert (g0.index, g0.samples, g0.util_mean_pct, g0.idle_frac, g0.pids) == (0, 4, 50.0, 0.0, (1000,))
    assert g0.mem_peak_frac == pytest.approx(8 / 140)
    assert (g1.util_mean_pct, g1.idle_frac, g1.power_mean_w) == (None, None, None)


@pytest.mark.parametrize("kw,match", [
    (dict(warn_gain=1.5), "share"),
    (dict(info_gain=0.2, warn_gain=0.1), "info_gain"),
    (dict(min_steps=-1), "negative"),
    (dict(bf16_speedup=0.5), "ratios"),
])
def test_thresholds_validate(kw, match):
    with pytest.raises(ValueError, match=match):
        Thresholds(**kw)


def test_a_short_run_is_measured_outside_the_profiler_window(build):
    """10 steps with the window on the last five: the statistics come from the last unprofiled
    steps, not from profiled ones (which run slower)."""
    th = Thresholds()
    assert [s.step for s in steady_steps(build.steps(n=10), th, exclude=(5, 9))] == [2, 3, 4]
    assert [s.step for s in steady_steps(build.steps(n=4), th, exclude=(1, 3))] == [1, 2, 3]  # too few outside


def test_steps_recorded_with_allocation_history_are_left_out(build):
    """``run`` recorded allocation history in steps 20-24 to name a leak's sites (every
    allocation took a stack: 3x slower here, the first 40x): no figure counts them, and they
    make no one-off step, stall or slow-down; ``history_steps`` says which were left out."""
    slow = {20: 1600.0, 21: 120.0, 22: 120.0, 23: 120.0, 24: 120.0}
    steps = build.steps(n=60, step_ms=lambda i: slow.get(i, 40.0))
    counted = rank_step_stats(steps, Thresholds(), exclude=(55, 59))
    assert counted.one_off is not None and counted.one_off.steps == (20,)  # what it was taken for
    s = rank_step_stats(steps, Thresholds(), exclude=(55, 59), history=(20, 24))
    assert s.history_steps == (20, 21, 22, 23, 24)
    assert (s.n_used, s.step_ms, s.mean_step_ms, s.total_ms) == (44, 40.0, 40.0, 44 * 40.0)
    assert s.one_off is None and not s.tail.stalls
    assert s.trend is None or s.trend.growth_ms == pytest.approx(0.0, abs=1e-6)
    assert 20 not in [x.step for x in steady_steps(steps, Thresholds(), (55, 59), (20, 24))]


def test_history_steps_inside_warm_up_or_a_short_run(build):
    th = Thresholds()
    # inside warm-up: left out anyway, not reported as left out for the history
    s = rank_step_stats(build.steps(n=30), th, history=(1, 4))
    assert (s.n_used, s.history_steps) == (25, ())
    # straddling the end of warm-up: only the steps past it are reported
    assert rank_step_stats(build.steps(n=30), th, history=(3, 7)).history_steps == (5, 6, 7)
    # a short run measures the last steps outside both the window and the history
    assert [x.step for x in steady_steps(build.steps(n=10), th, (8, 9), (4, 5))] == [2, 3, 6, 7][-3:]


def test_the_leak_sites_record_feeds_the_history_steps_to_every_view(build):
    from gpudoctor.analysis.facts import rank_stats
    from gpudoctor.analysis.run_stats import run_stats
    from gpudoctor.records.memory import LeakSites

    # the fixture's profiler window is steps 10-14; warm-up 0-5: 44 steady steps
    run = build.run(steps_by_rank={0: build.steps(n=60, step_ms=lambda i: 400.0 if 30 <= i <= 34 else 40.0)})
    plain = rank_stats(run, 0, Thresholds())
    assert (plain.n_used, plain.history_steps) == (49, ()) and plain.mean_step_ms > 40.0
    run.leak_sites[0] = LeakSites(step_from=30, step_to=34, history_steps=(30, 34))
    s = rank_stats(run, 0, Thresholds())
    assert (s.n_used, s.history_steps, s.mean_step_ms) == (44, (30, 31, 32, 33, 34), 40.0)
    (view,) = run_stats(run)
    assert (view.steps, view.history_steps, view.mean_step_ms) == (44, s.history_steps, 40.0)
    assert view.history == ("rank 0: 5 steps (30-34) ran with allocation history on, to name the "
                            "leak's sites — left out of the steady figures")
    run.leak_sites[0] = LeakSites(step_from=30, step_to=34)  # memory mode / older recordings
    assert rank_stats(run, 0, Thresholds()) == plain
