"""Data-loader bound and host-to-device copy rules, positive and negative, exact numbers."""

from __future__ import annotations

from gpudoctor.analysis.diagnose import diagnose
from gpudoctor.records.finding import Severity
from gpudoctor.records.run import MemcpyStat


def by_code(findings):
    return {f.code: f for f in findings}


def test_data_loader_bound_with_defaults(build):
    loader = build.loader(num_workers=0, pin_memory=False, persistent_workers=False,
                          prefetch_factor=None, batch_size=128)
    run = build.run(steps_by_rank={0: build.steps(data_wait_ms=24.0, gpu_ms=14.0)},
                    configs={0: build.config(loaders=(loader,), usable_cpus=32, local_world_size=4)},
                    windows={0: build.window(gpu_busy_frac=0.35)})
    f = by_code(diagnose(run))["GD-RUN-DATALOADER"]
    assert f.severity is Severity.WARN
    assert f.expected_gain == 0.6
    assert f.title == "Data-loader bound: 60.0% of each step waits for the next batch"
    assert f.evidence == (
        "waiting for the next batch: 24.00 ms of a 40.00 ms mean step (median 24.00 ms of 40.00 ms), rank 0",
        "DataLoader: num_workers=0, pin_memory=False, persistent_workers=False, "
        "prefetch_factor=None, batch_size=128",
        "GPU busy 35.0% of the step",
    )
    assert "num_workers=7,             # was 0" in f.fix  # 32 CPUs / 4 ranks, one for the trainer
    assert "# num_workers=7: 8 cores per rank (32 CPUs / 4 ranks on this node) - 1, at most 8" in f.fix
    assert "pin_memory=True" in f.fix and "non_blocking=True" in f.fix


def test_small_data_wait_is_silent_and_info_band(build):
    quiet = build.run(steps_by_rank={0: build.steps(data_wait_ms=3.6)})  # 9%: below 10%
    assert "GD-RUN-DATALOADER" not in by_code(diagnose(quiet))


def test_data_loader_uses_worst_rank(build):
    run = build.run(
        steps_by_rank={0: build.steps(rank=0), 1: build.steps(rank=1, data_wait_ms=8.0)},
        configs={0: build.config(0, world_size=2), 1: build.config(1, world_size=2)},
        windows={0: build.window(0), 1: build.window(1, gpu_busy_frac=0.5)}, world_size=2)
    f = by_code(diagnose(run))["GD-RUN-DATALOADER"]
    assert f.expected_gain == 0.2 and "rank 1" in f.evidence[0]
    assert f.evidence[-1] == "rank 1 of 2 is the worst; the other ranks do not show it"


def test_a_data_wait_hidden_by_queued_gpu_work_is_no_finding(build):
    # the host waits 8 ms a step for data, but the GPU is busy 92% of the step meanwhile: the
    # wait overlaps queued work, only 3.2 ms (8%) of it leaves the GPU idle
    run = build.run(steps_by_rank={0: build.steps(data_wait_ms=8.0)})
    assert "GD-RUN-DATALOADER" not in by_code(diagnose(run))


def test_per_sample_copies_owns_the_data_wait(build):
    loader = build.loader(num_workers=0, pin_memory=False)
    steps = build.steps(h2d_copies=512, h2d_bytes=512 * 12288, h2d_pageable_bytes=512 * 12288,
                        h2d_blocking_copies=512, h2d_ms=6.0, data_wait_ms=24.0, gpu_ms=10.0)
    run = build.run(steps_by_rank={0: steps}, configs={0: build.config(loaders=(loader,))},
                    windows={0: build.window(gpu_busy_frac=0.3)})
    findings = diagnose(run)
    assert findings[0].code == "GD-RUN-H2D-PER-SAMPLE"
    assert findings[0].expected_gain == 0.6  # max(6/40 copy share, 24/40 data wait share)
    assert findings[0].evidence[0] == ("512 host-to-device copies per step for a batch of 256, "
                                       "12.0 KiB each on average")
    codes = by_code(findings)
    assert "GD-RUN-DATALOADER" not in codes and "GD-RUN-H2D-PAGEABLE" not in codes


def test_per_sample_copies_outside_loader_count_copy_time_only(build):
    steps = build.steps(h2d_copies=64, h2d_bytes=64 * 4096, h2d_ms=8.0)
    f = by_code(diagnose(build.run(steps_by_rank={0: steps})))["GD-RUN-H2D-PER-SAMPLE"]
    assert f.expected_gain == 0.2


def test_few_large_copies_are_not_per_sample(build):
    steps = build.steps(h2d_copies=64, h2d_bytes=64 * 1024 * 1024, h2d_ms=0.2)
    assert "GD-RUN-H2D-PER-SAMPLE" not in by_code(diagnose(build.run(steps_by_rank={0: steps})))


def test_pageable_copies(build):
    mib = build.MIB
    steps = build.steps(h2d_bytes=50 * mib, h2d_pageable_bytes=50 * mib, h2d_copies=2,
                        h2d_blocking_copies=2, h2d_ms=10.0, gpu_ms=20.0)
    f = by_code(diagnose(build.run(steps_by_rank={0: steps})))["GD-RUN-H2D-PAGEABLE"]
    assert (f.severity, f.expected_gain) == (Severity.WARN, 0.25)
    assert f.evidence[0] == ("50.0 MiB copied host-to-device per step in 2 copies; 100.0% of it "
                             "from pageable memory")
    assert "pin_memory()" in f.fix


def test_pageable_share_from_window_when_step_probe_has_no_time(build):
    mib = build.MIB
    steps = build.steps(h2d_bytes=50 * mib, h2d_pageable_bytes=50 * mib, h2d_copies=2, h2d_ms=None)
    window = build.window(memcpy=(MemcpyStat(kind="HtoD", pinned=False, count=10, bytes=500 * mib,
                                             total_us=50_000.0),))
    f = by_code(diagnose(build.run(steps_by_rank={0: steps}, windows={0: window})))
    assert f["GD-RUN-H2D-PAGEABLE"].expected_gain == 0.25  # 50 ms over 5 window steps / 40 ms


def test_pinned_blocking_copies(build):
    mib = build.MIB
    steps = build.steps(h2d_bytes=50 * mib, h2d_copies=2, h2d_blocking_copies=2, h2d_ms=6.0)
    f = by_code(diagnose(build.run(steps_by_rank={0: steps})))
    assert "GD-RUN-H2D-PAGEABLE" not in f
    assert f["GD-RUN-H2D-BLOCKING"].expected_gain == 0.15


def test_pinned_non_blocking_is_silent(build):
    mib = build.MIB
    steps = build.steps(h2d_bytes=50 * mib, h2d_copies=2, h2d_blocking_copies=0, h2d_ms=0.3)
    assert not diagnose(build.run(steps_by_rank={0: steps}))
