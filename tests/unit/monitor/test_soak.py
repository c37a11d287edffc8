"""The soak verdict (analysis/soak.py) and its view (report/soak_view.py), on synthetic soaks whose
figures are known exactly, and on the 5-second H200 recording (too short for a verdict)."""

from __future__ import annotations

import io
import math
from dataclasses import replace
from pathlib import Path

import pytest
from rich.console import Console

from gpudoctor.analysis.soak import (
    SOAK_LIMITS, compute_bound, memory_trend, metric_stats, summarize_soak,
)
from gpudoctor.records.gpu import GpuSample, HostSample
from gpudoctor.records.units import GIB, MIB
from gpudoctor.report.soak_view import render_soak, verdict_lines

T0 = 1_795_000_000.0
STEP = 5.0  # seconds between samples, as the seed samples a 24 h soak
N = 360  # 30 minutes


def _steady(k: int) -> GpuSample:
    return GpuSample(
        timestamp_s=T0 + STEP * k, index=0, name="NVIDIA H200", util_gpu_pct=94.0 + k % 5,
        sm_clock_mhz=1980, mem_clock_mhz=3201, power_w=600.0 + 10 * (k % 3),
        temperature_c=55.0, mem_used_bytes=70 * GIB, mem_total_bytes=140 * GIB,
        throttle_reasons=("gpu_idle",) if k == 0 else (), ecc_errors_uncorrected=0,
    )


def _troubled(k: int) -> GpuSample:
    return GpuSample(
        timestamp_s=T0 + STEP * k, index=1, name="NVIDIA H200",
        util_gpu_pct=40.0 if k % 3 == 0 else 95.0, sm_clock_mhz=1500 if k % 4 == 0 else 1980,
        mem_clock_mhz=3201, power_w=700.0, temperature_c=80.0,
        mem_used_bytes=10 * GIB + 2 * MIB * k, mem_total_bytes=140 * GIB,
        throttle_reasons=("sw_power_cap",) if k % 4 == 0 else (), ecc_errors_uncorrected=0,
    )


def _host(k: int) -> HostSample:
    return HostSample(timestamp_s=T0 + STEP * k, cpu_pct=40.0 + k // 2 % 2 * 10,
                      ram_used_bytes=30 * GIB, ram_total_bytes=64 * GIB)


def _text(renderable, width: int) -> str:
    console = Console(file=io.StringIO(), width=width, color_system=None)
    console.print(renderable)
    return console.file.getvalue()


@pytest.fixture
def soak():
    gpus = [f(k) for k in range(N) for f in (_steady, _troubled)]
    return summarize_soak(gpus, [_host(k) for k in range(0, N, 2)])


def test_steady_gpu_is_stable_with_exact_figures(soak):
    g = soak.gpus[0]
    util = g.stat("util_gpu_pct")
    assert util.mean == 96.0 and util.spread == pytest.approx(math.sqrt(2))
    assert util.fluctuation_pct == pytest.approx(100 * math.sqrt(2) / 96)
    assert (util.low, util.high) == (94.0, 98.0)
    assert g.throttle_s == ()  # gpu_idle is not throttling
    assert g.covered_s == N * STEP and g.gap_s == 0
    assert g.memory.fit.slope == 0 and not g.memory.leak_like
    assert g.problems == () and g.verdict == "stable"
    assert verdict_lines(g) == [
        "soak verdict: GPU 0 stable: utilization fluctuates 1.5 % (< 5 %), no throttling, memory flat"]


def test_troubled_gpu_names_fluctuation_throttle_and_a_leak(soak):
    g = soak.gpus[1]
    assert g.problems == ("fluctuation", "throttle", "memory_rising")
    assert g.verdict == "unstable" and soak.verdict == "unstable"
    assert g.throttle_s == (("sw_power_cap", 90 * STEP),)
    assert g.throttle_share("sw_power_cap") == 0.25
    assert g.memory.bytes_per_min == pytest.approx(24 * MIB)  # 2 MiB every 5 s
    assert g.memory.fit.r2 == pytest.approx(1.0) and g.memory.leak_like
    line = " ".join(" ".join(verdict_lines(g)).split())
    assert "clocks held back by sw_power_cap 25% of the time" in line
    assert "memory used rising +24.0 MiB/min for 29.9 min" in line


def test_a_gap_in_the_log_is_not_counted_as_throttled():
    samples = [_troubled(k) for k in range(0, 40, 4)]  # every sample throttled
    later = [replace(_troubled(4 * k), timestamp_s=T0 + 3600 + STEP * 4 * k) for k in range(10)]
    g = summarize_soak(samples + later).gpus[0]
    # 20 samples 20 s apart and one 3420 s gap, capped at 3 x 20 s
    assert g.throttle_s == (("sw_power_cap", 18 * 20 + 60 + 20),)
    assert g.gap_s == pytest.approx(3420 - 60)
    assert "(the log pauses for 56.0 min in all" in _text(render_soak(summarize_soak(samples + later)), 120)


def test_allocator_warm_up_then_flat_is_not_a_leak():
    points = [(T0 + STEP * k, float(min(k, 220) * 20 * MIB)) for k in range(N)]  # 18 min up
    trend = memory_trend(points)
    assert trend.growth_bytes > SOAK_LIMITS["leak_min_growth_bytes"].value
    assert trend.fit.r2 > SOAK_LIMITS["leak_min_r2"].value
    assert trend.late_fit.slope < 0.25 * trend.fit.slope  # it levelled off
    assert not trend.leak_like


def test_short_climb_is_not_yet_a_leak():
    points = [(T0 + k, float(k * 10 * MIB)) for k in range(60)]  # 600 MiB in one minute
    assert not memory_trend(points).leak_like
    assert memory_trend(points[:2]) is None


def test_idle_short_and_missing_metrics_do_not_crash():
    idle = [GpuSample(timestamp_s=T0 + STEP * k, index=0, name="Tesla T4", util_gpu_pct=0.0)
            for k in range(N)]
    s = summarize_soak(idle)
    assert s.gpus[0].verdict == "idle" and [m.metric for m in s.gpus[0].stats] == ["util_gpu_pct"]
    assert s.gpus[0].stat("util_gpu_pct").fluctuation_pct is None  # mean 0
    short = summarize_soak([_troubled(k) for k in range(5)])
    assert short.gpus[0].verdict == "too_short"
    assert "so far:" in " ".join(verdict_lines(short.gpus[0]))
    bare = summarize_soak([GpuSample(timestamp_s=T0 + k, index=0, name="x") for k in range(3)])
    assert bare.gpus[0].stats == () and bare.gpus[0].memory is None
    assert "(no metric given)" in _text(render_soak(bare), 80)
    assert summarize_soak([]).verdict == "no_samples"
    assert "no GPU samples" in _text(render_soak(summarize_soak([], [_host(0)])), 80)


def test_metric_stats_of_one_value():
    st = metric_stats([5.0])
    assert (st.mean, st.spread, st.fluctuation_pct) == (5.0, 0.0, 0.0)
    assert metric_stats([]) is None


def test_compute_bound_needs_high_util_and_little_pcie():
    s = _steady(1)
    busy = replace(s, util_gpu_pct=99.0, pcie_rx_bytes_per_s=2e8, pcie_tx_bytes_per_s=1e8)
    assert compute_bound(busy)
    assert not compute_bound(replace(busy, pcie_rx_bytes_per_s=8e9))
    assert not compute_bound(replace(busy, util_gpu_pct=75.0))
    assert not compute_bound(s)  # PCIe not measured: no claim


def test_every_limit_has_a_reason():
    assert all(len(limit.reason) > 20 for limit in SOAK_LIMITS.values())


@pytest.mark.parametrize("width", [80, 120])
def test_summary_golden(soak, golden, width):
    golden(f"monitor/soak-summary-{width}.txt", _text(render_soak(soak), width))


def test_recorded_h200_seconds_are_too_short_for_a_verdict(golden):
    from gpudoctor.collectors.sample_log import read_gpu_log, read_host_log

    fixtures = Path(__file__).resolve().parents[2] / "fixtures" / "monitor"
    s = summarize_soak(read_gpu_log(fixtures / "h200-samples.jsonl"),
                       read_host_log(fixtures / "h200-samples.host.jsonl"))
    assert s.verdict == "too_short"
    assert s.gpus[0].problems == ("fluctuation", "throttle")  # a 5 s burst of matmuls, capped
    golden("monitor/soak-h200-seconds-80.txt", _text(render_soak(s), 80))
