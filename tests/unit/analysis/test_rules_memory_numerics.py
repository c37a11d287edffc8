"""Leak, fragmentation, headroom, NaN/inf loss and GradScaler rules."""

from __future__ import annotations

from gpudoctor.analysis.diagnose import diagnose
from gpudoctor.records.finding import Severity


def by_code(findings):
    return {f.code: f for f in findings}


def test_leak(build):
    gib, mib = build.GIB, build.MIB
    steps = build.steps(mem=lambda i: build.mem(allocated=gib + i * 4 * mib))
    f = by_code(diagnose(build.run(steps_by_rank={0: steps})))["GD-RUN-MEM-LEAK"]
    assert f.severity is Severity.WARN and f.expected_gain is None
    assert f.evidence == (
        "allocated grew from 1.0 GiB to 1.1 GiB over 20 steps after warm-up: +4.0 MiB per step "
        "(least squares, R^2 1.00), rank 0",
        "at this rate the 140.0 GiB GPU is full in about 34304 more steps",
    )
    assert f.title == "Memory leak: allocated memory grows 4.0 MiB every step"


def test_fast_leak_is_an_error(build):
    gib = build.GIB
    steps = build.steps(mem=lambda i: build.mem(allocated=gib + i * 64 * build.MIB))
    assert by_code(diagnose(build.run(steps_by_rank={0: steps})))["GD-RUN-MEM-LEAK"].severity is Severity.ERROR


def test_flat_or_noisy_memory_is_no_leak(build):
    gib, mib = build.GIB, build.MIB
    noisy = build.steps(mem=lambda i: build.mem(allocated=gib + (i % 2) * 64 * mib))
    assert "GD-RUN-MEM-LEAK" not in by_code(diagnose(build.run(steps_by_rank={0: noisy})))
    small = build.steps(mem=lambda i: build.mem(allocated=8 * gib + i * mib))  # < 5% growth
    assert "GD-RUN-MEM-LEAK" not in by_code(diagnose(build.run(steps_by_rank={0: small})))
    assert not diagnose(build.run())


def test_fragmentation_with_retries(build):
    gib = build.GIB
    steps = build.steps(mem=lambda i: build.mem(peak=3 * gib, peak_reserved=6 * gib, retries=i))
    f = by_code(diagnose(build.run(steps_by_rank={0: steps})))["GD-RUN-FRAGMENTATION"]
    assert f.severity is Severity.WARN
    assert f.title == "Allocator fragmentation: 25 allocation retries, 3.0 GiB reserved but unused at the peak"
    assert f.evidence[1] == "allocation retries after warm-up: 25; OOMs: 0"
    assert f.fix.startswith("export PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True")


def test_fragmentation_gap_alone_is_info_and_retries_in_warmup_do_not_count(build):
    gib = build.GIB
    steps = build.steps(mem=lambda i: build.mem(peak=3 * gib, peak_reserved=6 * gib,
                                                retries=min(i, 2)))
    f = by_code(diagnose(build.run(steps_by_rank={0: steps})))["GD-RUN-FRAGMENTATION"]
    assert f.severity is Severity.INFO


def test_fragmentation_with_expandable_segments_already(build):
    gib = build.GIB
    steps = build.steps(mem=lambda i: build.mem(peak=3 * gib, peak_reserved=6 * gib, retries=i))
    cfg = build.config(alloc_conf="expandable_segments:True")
    f = by_code(diagnose(build.run(steps_by_rank={0: steps}, configs={0: cfg})))
    assert "lower the peak" in f["GD-RUN-FRAGMENTATION"].fix


def test_headroom(build):
    run = build.run(windows={0: build.window(gpu_busy_frac=0.5)})
    f = by_code(diagnose(run))["GD-RUN-MEM-HEADROOM"]
    assert f.severity is Severity.INFO and f.expected_gain is None
    assert f.title == "Memory headroom: 4.3% of GPU memory used while the GPU is busy 50.0%"
    assert "~18x larger" in f.fix


def test_no_headroom_finding_when_saturated_or_full_or_data_bound(build):
    assert not diagnose(build.run())
    full = build.steps(mem=build.mem(peak_reserved=100 * build.GIB, peak=99 * build.GIB))
    run = build.run(steps_by_rank={0: full}, windows={0: build.window(gpu_busy_frac=0.5)})
    assert "GD-RUN-MEM-HEADROOM" not in by_code(diagnose(run))
    data = build.run(steps_by_rank={0: build.steps(data_wait_ms=8.0)},
                     windows={0: build.window(gpu_busy_frac=0.5)})
    assert "GD-RUN-MEM-HEADROOM" not in by_code(diagnose(data))
    # a run that ran out of memory has no headroom, whatever its steady steps used
    oom = build.run(steps_by_rank={0: build.steps(mem=build.mem(ooms=1))},
                    windows={0: build.window(gpu_busy_frac=0.5)})
    assert "GD-RUN-MEM-HEADROOM" not in by_code(diagnose(oom))


def test_nonfinite_loss(build):
    run = build.run(steps_by_rank={0: build.steps(loss_finite=lambda i: i < 7)})
    f = diagnose(run)[0]
    assert (f.code, f.severity) == ("GD-RUN-NONFINITE-LOSS", Severity.ERROR)
    assert f.evidence == ("rank 0: loss not finite on 23 of 30 steps, first at step 7",)


def test_nan_loss_value_without_flag(build):
    run = build.run(steps_by_rank={0: build.steps(loss_finite=None, loss=lambda i: float("nan") if i == 3 else 1.0)})
    assert diagnose(run)[0].evidence == ("rank 0: loss not finite on 1 of 30 steps, first at step 3",)


def test_scaler_collapse(build):
    steps = build.steps(scaler_scale=lambda i: 65536.0 / 2**i, scaler_skipped=True)
    f = by_code(diagnose(build.run(steps_by_rank={0: steps})))["GD-RUN-SCALER-COLLAPSE"]
    assert f.severity is Severity.ERROR
    # steps 5-29 without the profiler window's 10-14: 20 steady steps
    assert f.evidence == ("scale went from 2048 to 0.00012207 (lowest 0.00012207) over 20 steps "
                          "after warm-up", "optimizer steps skipped: 20 of 20 (100.0%)")


def test_scaler_skipping_often_is_a_warning(build):
    steps = build.steps(scaler_scale=65536.0, scaler_skipped=lambda i: i % 5 == 0)
    f = by_code(diagnose(build.run(steps_by_rank={0: steps})))["GD-RUN-SCALER-COLLAPSE"]
    assert f.severity is Severity.WARN and "4 of 20 (20.0%)" in f.evidence[1]


def test_healthy_scaler_is_silent(build):
    steps = build.steps(scaler_scale=65536.0, scaler_skipped=False)
    assert not diagnose(build.run(steps_by_rank={0: steps}))


def test_busy_share_falls_back_to_nvml_without_profiler_window(build):
    # no window: NVML's 40% utilisation stands for the busy share (gpu_ms is only a span)
    run = build.run(windows={}, gpu=build.gpu_samples(util_gpu_pct=40.0))
    f = by_code(diagnose(run))["GD-RUN-MEM-HEADROOM"]
    assert f.title == "Memory headroom: 4.3% of GPU memory used while the GPU is busy 40.0%"
    assert not diagnose(build.run(windows={}, gpu=[]))  # no busy figure at all: no guess
