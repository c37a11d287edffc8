"""Host-sync, launch-overhead and fp32-compute rules."""

from __future__ import annotations

import pytest

from gpudoctor.analysis.diagnose import diagnose
from gpudoctor.records.finding import Severity


def by_code(findings):
    return {f.code: f for f in findings}


def test_host_sync_every_step(build):
    # 40 ms steps, the GPU busy 24 ms of them, the host blocked 12 ms a step in syncs (the
    # window's time, as in recordings without per-step sync times): without the syncs the host
    # queues ahead and a step takes max(40 - 12, 24) = 28 ms
    run = build.run(steps_by_rank={0: build.steps(host_syncs=2)},
                    windows={0: build.window(gpu_busy_frac=0.6, sync_calls=10, sync_ms=60.0)})
    f = by_code(diagnose(run))["GD-RUN-HOST-SYNC"]
    assert f.severity is Severity.WARN
    assert f.expected_gain == 0.3  # min(12 blocked, 16 idle) / 40
    assert "at least 30.0% of the step saved" in f.evidence[-1] and "at most 38.8%" in f.evidence[-1]
    assert f.evidence[0] == "2 host-device syncs per step (median), rank 0"
    assert "loss.detach()" in f.fix


def test_host_sync_cost_uses_the_time_measured_in_every_step(build):
    # the probes timed 14 ms of blocking per step; the window's 2 ms (the profiler slows the
    # host, so it waits less there) is not used
    run = build.run(steps_by_rank={0: build.steps(host_syncs=2, sync_ms=14.0)},
                    windows={0: build.window(gpu_busy_frac=0.6, sync_calls=10, sync_ms=10.0)})
    assert by_code(diagnose(run))["GD-RUN-HOST-SYNC"].expected_gain == 0.35  # min(14, 16) / 40


def test_a_sync_while_waiting_for_data_costs_only_its_blocked_time(build):
    # a data-bound step (20 ms waiting for batches) that also reads the loss: the sync blocks
    # 1 ms; removing it saves that, not the data wait (the loader is named instead)
    run = build.run(steps_by_rank={0: build.steps(host_syncs=1, sync_ms=1.0, data_wait_ms=20.0)},
                    windows={0: build.window(gpu_busy_frac=0.3)})
    found = by_code(diagnose(run))
    assert found["GD-RUN-DATALOADER"].severity is Severity.WARN
    assert found["GD-RUN-HOST-SYNC"].severity is Severity.INFO


def test_rare_syncs_are_silent(build):
    logging_every_20 = build.steps(host_syncs=lambda i: 1 if i % 20 == 0 else 0)
    run = build.run(steps_by_rank={0: logging_every_20}, windows={0: build.window(gpu_busy_frac=0.6)})
    assert "GD-RUN-HOST-SYNC" not in by_code(diagnose(run))


def test_syncs_every_step_on_a_busy_gpu_are_only_a_note(build):
    # the GPU stays busy 92%: the syncs cost at most 6.75% (idle 8% - data 1% - copies 0.25%);
    # a note without a promised gain, not a prescription
    busy = build.run(steps_by_rank={0: build.steps(host_syncs=2)},
                     windows={0: build.window(sync_calls=10, sync_ms=15.0)})
    f = by_code(diagnose(busy))["GD-RUN-HOST-SYNC"]
    assert (f.severity, f.expected_gain) == (Severity.INFO, None)
    assert f.title == "2 host sync(s) per step cost at most 6.8% of it here: too little to act on"
    assert f.evidence[1] == ("GPU busy 92.0% of a 40.00 ms mean step; at most 6.8% idle that data wait "
                             "or copies do not explain (it matters from 15.0%)")
    assert f.evidence[2].startswith("profiler window: 15.0 ms blocked in 10 synchronising calls")


def test_host_sync_idle_is_measured_against_the_unprofiled_step(build):
    # the profiler slowed the window's steps to 60 ms (wall 300 ms / 5 steps) while the run's
    # steps take 40 ms; the GPU was busy 0.6 x 300 / 5 = 36 ms a step: 90% of a real step, not 60%
    run = build.run(steps_by_rank={0: build.steps(host_syncs=2)},
                    windows={0: build.window(gpu_busy_frac=0.6, wall_ms=300.0)})
    f = by_code(diagnose(run))["GD-RUN-HOST-SYNC"]
    assert (f.severity, f.expected_gain) == (Severity.INFO, None)


def test_host_sync_needs_a_gpu(build):
    run = build.run(steps_by_rank={0: build.steps(host_syncs=3, gpu_ms=None, mem=None)},
                    configs={0: build.config(device="cpu", cuda_device_index=None)}, windows={},
                    gpu=[])
    assert "GD-RUN-HOST-SYNC" not in by_code(diagnose(run))


def test_launch_bound(build):
    run = build.run(windows={0: build.window(gpu_busy_frac=0.3, kernel_us_p50=4.0,
                                             kernels_under_10us_frac=0.8, kernel_count=4000)},
                    configs={0: build.config(optimizer_fused=False)})
    f = by_code(diagnose(run))["GD-RUN-LAUNCH-BOUND"]
    assert f.expected_gain == 0.6875
    assert f.evidence[0] == "800 kernels per step, median 4.0 us, 80.0% under 10 us, rank 0"
    assert "torch.compile" in f.fix and "fused=True" in f.fix


def test_launch_bound_yields_to_host_sync(build):
    # the host blocks 20 ms a step in the sync: its own work (19.6 ms) would fit under the
    # GPU's 12 ms... no: it exceeds it, but the syncs still cost 40 - 19.6 = 20.4 ms a step
    run = build.run(steps_by_rank={0: build.steps(host_syncs=1)},
                    windows={0: build.window(gpu_busy_frac=0.3, kernel_us_p50=4.0, sync_ms=100.0,
                                             kernels_under_10us_frac=0.8)})
    codes = by_code(diagnose(run))
    assert "GD-RUN-HOST-SYNC" in codes and codes["GD-RUN-HOST-SYNC"].severity is Severity.WARN


def test_syncs_that_never_block_yield_to_launch_bound(build):
    # a sync every step, but the host never waits in it (0 ms blocked): the host's own work,
    # 39.6 ms a step, is the bottleneck; removing the sync frees nothing
    run = build.run(steps_by_rank={0: build.steps(host_syncs=1)},
                    windows={0: build.window(gpu_busy_frac=0.3, kernel_us_p50=4.0,
                                             kernels_under_10us_frac=0.8)})
    codes = by_code(diagnose(run))
    assert "GD-RUN-LAUNCH-BOUND" in codes and codes["GD-RUN-LAUNCH-BOUND"].severity is Severity.WARN
    assert codes["GD-RUN-HOST-SYNC"].severity is Severity.INFO
    assert codes["GD-RUN-HOST-SYNC"].title.endswith("the host's own work is the bottleneck")


def test_large_kernels_are_not_launch_bound(build):
    run = build.run(windows={0: build.window(gpu_busy_frac=0.3)})  # p50 45 us, 20% under 10 us
    assert "GD-RUN-LAUNCH-BOUND" not in by_code(diagnose(run))


FP32 = dict(autocast_dtypes=(), tf32_matmul=False, tf32_cudnn=True, cudnn_benchmark=False,
            channels_last=False, float32_matmul_precision="highest")


def test_fp32_compute_bound(build):
    f = by_code(diagnose(build.run(configs={0: build.config(**FP32)})))["GD-RUN-FP32-COMPUTE"]
    assert f.severity is Severity.WARN
    assert f.expected_gain == 0.46  # busy 0.92 x (1 - 1/2.0)
    assert "torch.backends.cudnn.benchmark = True" in f.fix
    assert "channels_last" in f.fix and "torch.bfloat16" in f.fix


def test_fp32_with_tf32_expects_less(build):
    cfg = build.config(**{**FP32, "tf32_matmul": True})
    f = by_code(diagnose(build.run(configs={0: cfg})))["GD-RUN-FP32-COMPUTE"]
    assert f.expected_gain == pytest.approx(0.92 * (1 - 1 / 1.3), abs=1e-4)
    assert "allow_tf32" not in f.fix


def test_fp32_rule_silent_with_autocast_or_idle_gpu(build):
    assert not diagnose(build.run())  # bf16 autocast: the default builder
    idle = build.run(configs={0: build.config(**FP32)}, windows={0: build.window(gpu_busy_frac=0.5)})
    assert "GD-RUN-FP32-COMPUTE" not in by_code(diagnose(idle))
