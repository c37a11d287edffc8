"""Findings that come from the step's resources and their ceilings: copies at the link's rate,
syncs against launches by the host-GPU balance, DataParallel's cost over one GPU, and advice
fitted to the script's own optimizer and compile state."""

from __future__ import annotations

import dataclasses

from gpudoctor.analysis.compute_rules import optimizer_line
from gpudoctor.analysis.diagnose import diagnose
from gpudoctor.records.finding import Severity
from gpudoctor.records.run import DdpConfig, MemcpyStat, OpStat
from gpudoctor.records.units import MIB


def by_code(findings):
    return {f.code: f for f in findings}


def _copy_window(build, mb_per_step: float, copy_ms_per_step: float, busy_ms: float, **kw):
    n = 5
    return build.window(
        gpu_busy_ms=busy_ms * n, memcpy_ms=copy_ms_per_step * n, kernel_ms=(busy_ms - copy_ms_per_step) * n,
        memcpy=(MemcpyStat(kind="HtoD", pinned=True, count=2 * n, bytes=int(mb_per_step * MIB) * n,
                           total_us=copy_ms_per_step * 1000 * n),), **kw)


def test_pinned_async_copies_at_the_link_rate_are_named_with_their_bytes(build):
    # 400 MB a step of float32 images at ~50 GB/s: 8 ms of a 20 ms step on the GPU, no kernel
    # overlapping them; pinned and non_blocking, so no other rule speaks of them
    steps = build.steps(step_ms=20.0, h2d_bytes=400 * MIB, h2d_wide_float_bytes=400 * MIB, h2d_ms=0.2)
    run = build.run(steps_by_rank={0: steps}, windows={0: _copy_window(build, 400, 8.0, 19.0)})
    f = by_code(diagnose(run))["GD-RUN-COPY-BOUND"]
    assert f.severity is Severity.WARN
    # the better of half the bytes (bf16: 8.2 ms x 1.0 x 0.5) and hiding it under 11.8 ms of compute
    assert f.expected_gain == round(8.2 / 20.0, 4)
    assert "uint8" in f.fix and "torch.cuda.Stream()" in f.fix
    assert any("of 63.0 GB/s (PCIe Gen5 x16 line rate of the NVIDIA H200 SXM (datasheet))" in e
               for e in f.evidence)
    assert any("100.0% of the bytes are float32/float64" in e for e in f.evidence)


def test_the_measured_ceiling_is_preferred_and_small_copies_are_silent(build):
    steps = build.steps(step_ms=20.0, h2d_bytes=400 * MIB, h2d_wide_float_bytes=0)
    run = build.run(steps_by_rank={0: steps}, windows={0: _copy_window(build, 400, 8.0, 19.0)})
    run.copy_ceiling_gbs = 55.5
    f = by_code(diagnose(run))["GD-RUN-COPY-BOUND"]
    assert any("measured by gpudoctor bench copy" in e for e in f.evidence)
    assert "uint8" not in f.fix  # no float32 bytes: only overlap and moving constant data
    assert "GD-RUN-PCIE-DEMAND" not in by_code(diagnose(run))  # one finding for one cause
    small = build.run(steps_by_rank={0: build.steps(step_ms=20.0)},
                      windows={0: _copy_window(build, 3, 0.06, 19.0)})
    assert "GD-RUN-COPY-BOUND" not in by_code(diagnose(small))


def test_pageable_copies_are_left_to_the_pageable_rule(build):
    steps = build.steps(step_ms=20.0, h2d_bytes=400 * MIB, h2d_pageable_bytes=400 * MIB)
    w = dataclasses.replace(_copy_window(build, 400, 8.0, 19.0), memcpy=(
        MemcpyStat(kind="HtoD", pinned=False, count=10, bytes=400 * MIB * 5, total_us=40000.0),))
    run = build.run(steps_by_rank={0: steps}, windows={0: w})
    assert "GD-RUN-COPY-BOUND" not in by_code(diagnose(run))


def _balanced(build, host_syncs=4, sync_ms=9.0, busy=10.0, step=20.0):
    # host and GPU take turns: the host works ~11 ms, then waits ~9 ms for the GPU's 10 ms
    steps = build.steps(step_ms=step, host_syncs=host_syncs, sync_ms=sync_ms, data_wait_ms=0.0, h2d_ms=0.0)
    w = build.window(gpu_busy_ms=busy * 5, kernel_count=4000, kernel_us_p50=4.0,
                     kernels_under_10us_frac=0.8, sync_calls=20, sync_ms=40.0)
    return build.run(steps_by_rank={0: steps}, windows={0: w})


def test_syncs_between_a_balanced_host_and_gpu_are_the_cause_not_the_launches(build):
    found = by_code(diagnose(_balanced(build)))
    sync = found["GD-RUN-HOST-SYNC"]
    assert sync.severity is Severity.WARN and sync.expected_gain == 0.45  # min(9, 20 - 10) / 20
    launch = found.get("GD-RUN-LAUNCH-BOUND")
    assert launch is None or launch.expected_gain < sync.expected_gain
    assert diagnose(_balanced(build))[0].code == "GD-RUN-HOST-SYNC"


def test_launch_bound_with_syncs_when_the_host_exceeds_the_gpu_by_the_margin(build):
    # the host works 18 ms against the GPU's 5 ms: without the syncs it still cannot feed the GPU
    run = _balanced(build, sync_ms=2.0, busy=5.0)
    found = by_code(diagnose(run))
    launch = found["GD-RUN-LAUNCH-BOUND"]
    assert launch.expected_gain == round(min(0.75, 13.0 / 20.0), 4)
    assert any("over 1.5x the GPU's" in e for e in launch.evidence)
    assert diagnose(run)[0].code == "GD-RUN-LAUNCH-BOUND"


def test_the_prescription_uses_the_scripts_own_optimizer_and_compile_state(build):
    cfg = build.config(optimizer="SGD", optimizer_fused=False, compiled=True)
    steps = build.steps(step_ms=20.0, data_wait_ms=0.0, h2d_ms=0.0)
    w = build.window(gpu_busy_ms=25.0, kernel_count=4000, kernel_us_p50=4.0, kernels_under_10us_frac=0.8)
    f = by_code(diagnose(build.run(steps_by_rank={0: steps}, configs={0: cfg}, windows={0: w})))["GD-RUN-LAUNCH-BOUND"]
    assert "torch.optim.SGD(model.parameters(), ..., fused=True)" in f.fix
    assert "AdamW" not in f.fix
    assert "model = torch.compile(model)  " not in f.fix and "reduce-overhead" in f.fix
    assert optimizer_line(build.config(optimizer="AdamW", optimizer_fused=True)) is None
    assert "foreach=True" in optimizer_line(build.config(optimizer="Lion", optimizer_fused=None))


def test_data_parallel_over_one_gpu_is_costed_from_the_window(build):
    cfg = build.config(ddp=DdpConfig(kind="dp", device_ids=(0,)))
    steps = build.steps(step_ms=31.0, data_wait_ms=0.0, h2d_ms=0.0)
    w = build.window(gpu_busy_ms=15.0 * 5, top_ops=(OpStat(name="DataParallel.forward", count=5,
                                                            total_us=25000.0, kind="cpu_op"),))
    f = by_code(diagnose(build.run(steps_by_rank={0: steps}, configs={0: cfg}, windows={0: w},
                                   gpu=build.gpu_samples())))["GD-RUN-DATA-PARALLEL"]
    assert f.severity is Severity.WARN and f.expected_gain == round(5.0 / 31.0, 4)
    assert "not nn.DataParallel" in f.fix and "removeprefix" in f.fix
    bare = build.window(gpu_busy_ms=15.0 * 5)
    note = by_code(diagnose(build.run(steps_by_rank={0: steps}, configs={0: cfg}, windows={0: bare},
                                      gpu=build.gpu_samples())))["GD-RUN-DATA-PARALLEL"]
    assert note.severity is Severity.INFO and note.expected_gain is None


def test_empty_cache_every_step_is_costed_from_the_allocator_calls(build):
    # 8 ms of a 40 ms step in cudaMalloc/cudaFree while the GPU idles half of it
    steps = build.steps(step_ms=40.0, empty_cache_calls=1)
    w = build.window(gpu_busy_ms=20.0 * 5, alloc_calls=300, alloc_ms=40.0)
    f = by_code(diagnose(build.run(steps_by_rank={0: steps}, windows={0: w})))["GD-RUN-EMPTY-CACHE"]
    assert f.severity is Severity.WARN and f.expected_gain == 0.2
    assert f.title.startswith("torch.cuda.empty_cache() every step")
    assert "expandable_segments" in f.fix
    quiet = build.window(gpu_busy_ms=20.0 * 5, alloc_calls=2, alloc_ms=0.1)
    assert "GD-RUN-EMPTY-CACHE" not in by_code(diagnose(build.run(windows={0: quiet})))


def test_a_sync_that_stops_the_host_loading_ahead_is_costed_not_dismissed(build):
    # 46 ms steps: the host collates in the main process (10 ms of data wait) and blocks 9 ms in
    # a per-step .item(); the GPU is busy 32.7 ms. The idle time is "explained" by data wait,
    # but the GPU is not fed: without the sync the host loads the next batch while the GPU runs
    steps = build.steps(step_ms=46.0, data_wait_ms=10.0, host_syncs=1, sync_ms=9.0, h2d_ms=0.0)
    w = build.window(gpu_busy_ms=32.7 * 5, sync_calls=5, sync_ms=45.0)
    inline = build.config(loaders=(build.loader(num_workers=0),))
    f = by_code(diagnose(build.run(steps_by_rank={0: steps}, windows={0: w}, configs={0: inline})))["GD-RUN-HOST-SYNC"]
    assert f.severity is Severity.WARN and f.expected_gain == round(9.0 / 46.0, 4)
    # with workers the batches are made meanwhile in other processes: the wait absorbs the sync
    workers = by_code(diagnose(build.run(steps_by_rank={0: steps}, windows={0: w})))["GD-RUN-HOST-SYNC"]
    assert workers.severity is Severity.INFO and workers.expected_gain is None


def test_copies_without_byte_counts_in_the_trace_take_the_probes_count(build):
    # some torch builds' traces carry no bytes for copies: the probes' per-step count stands in
    steps = build.steps(step_ms=20.0, h2d_bytes=800 * MIB, h2d_ms=0.1)
    w = dataclasses.replace(_copy_window(build, 800, 14.5, 20.0), memcpy=(
        MemcpyStat(kind="HtoD", pinned=True, count=10, bytes=None, total_us=14500.0 * 5),))
    f = by_code(diagnose(build.run(steps_by_rank={0: steps}, windows={0: w})))["GD-RUN-COPY-BOUND"]
    assert f.title.startswith("Copy-bound input: 839 MB a step")
    assert any("GB/s, " in e and "of 63.0 GB/s" in e for e in f.evidence)
