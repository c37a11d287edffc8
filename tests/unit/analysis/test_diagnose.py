"""diagnose(): ordering, the clean-script property (no false alarm), CPU-only mode, crashes."""

from __future__ import annotations

import itertools

import pytest

from gpudoctor.analysis.diagnose import diagnose, order_findings
from gpudoctor.analysis.thresholds import Thresholds
from gpudoctor.records.finding import Finding, Severity


def F(code, severity, gain=None):
    return Finding(code=code, severity=severity, title=code, expected_gain=gain)


def test_order_correctness_first_then_gain_then_notes():
    findings = [
        F("GD-RUN-MEM-HEADROOM", Severity.INFO),
        F("GD-RUN-HOST-SYNC", Severity.INFO, 0.05),
        F("GD-RUN-DATALOADER", Severity.WARN, 0.4),
        F("GD-RUN-CRASHED", Severity.ERROR),
        F("GD-RUN-NO-SET-EPOCH", Severity.WARN),
        F("GD-RUN-SAME-GPU", Severity.ERROR),
        F("GD-RUN-FP32-COMPUTE", Severity.WARN, 0.46),
    ]
    assert [f.code for f in order_findings(findings)] == [
        "GD-RUN-SAME-GPU", "GD-RUN-CRASHED", "GD-RUN-NO-SET-EPOCH",
        "GD-RUN-FP32-COMPUTE", "GD-RUN-DATALOADER", "GD-RUN-HOST-SYNC", "GD-RUN-MEM-HEADROOM",
    ]


def test_several_problems_ranked_by_gain(build):
    fp32 = dict(autocast_dtypes=(), tf32_matmul=False, cudnn_benchmark=False)
    run = build.run(steps_by_rank={0: build.steps(data_wait_ms=8.0, loss_finite=lambda i: i < 20)},
                    configs={0: build.config(**fp32)}, windows={0: build.window(gpu_busy_frac=0.7)})
    assert [(f.code, f.expected_gain) for f in diagnose(run)] == [
        ("GD-RUN-NONFINITE-LOSS", None),
        ("GD-RUN-FP32-COMPUTE", 0.35),
        ("GD-RUN-DATALOADER", 0.2),
    ]


# A tuned run in many shapes: fast and slow steps, one or two ranks, the loss read every 20
# steps, allocator noise, retries during warm-up only, well-overlapped DDP. None may warn.
@pytest.mark.parametrize("step_ms,busy,ranks,wait_ms", list(itertools.product(
    (4.0, 40.0, 400.0), (0.82, 0.97), (1, 2), (0.0, 0.05))))
def test_clean_run_never_warns(build, step_ms, busy, ranks, wait_ms):
    gib, mib = build.GIB, build.MIB
    steps = {}
    for r in range(ranks):
        steps[r] = build.steps(
            rank=r, n=60, step_ms=lambda i: step_ms * (1.0 + 0.05 * ((i * 7) % 3 - 1)),
            data_wait_ms=step_ms * wait_ms, h2d_ms=step_ms * 0.01, gpu_ms=step_ms * busy,
            host_syncs=lambda i: 1 if i % 20 == 0 else 0, h2d_copies=2, h2d_bytes=12 * mib,
            mem=lambda i: build.mem(allocated=2 * gib + (i % 3) * 8 * mib, peak=5 * gib,
                                    peak_reserved=int(5.5 * gib), retries=min(i, 2)))
    windows = {r: build.window(r, gpu_busy_frac=busy, nccl_ms=step_ms * 0.5 if ranks > 1 else 0.0,
                               nccl_overlap_frac=0.9 if ranks > 1 else None) for r in range(ranks)}
    configs = {r: build.config(r, world_size=ranks) for r in range(ranks)}
    gpu = [s for r in range(ranks) for s in build.gpu_samples(index=r, pids=(1000 + r,))]
    findings = diagnose(build.run(steps_by_rank=steps, windows=windows, configs=configs, gpu=gpu,
                                  world_size=ranks))
    assert [f.code for f in findings if f.severity is not Severity.INFO] == []


def test_cpu_only_run_says_so_and_keeps_host_rules(build):
    cpu = build.config(device="cpu", cuda_device_index=None, device_name="", autocast_dtypes=(),
                       loaders=(build.loader(num_workers=0, pin_memory=False),))
    steps = build.steps(data_wait_ms=30.0, gpu_ms=None, h2d_ms=None, mem=None, host_syncs=4,
                        h2d_bytes=0, h2d_copies=0)
    findings = diagnose(build.run(steps_by_rank={0: steps}, configs={0: cpu}, windows={}, gpu=[]))
    assert [f.code for f in findings] == ["GD-RUN-DATALOADER", "GD-RUN-CPU-ONLY"]
    assert "pin_memory" not in findings[0].fix
    assert findings[0].evidence[-1].startswith("CPU-only run")


def test_crash_without_steps(build):
    run = build.run(steps_by_rank={}, windows={}, status="crashed", exit_code=1,
                    error="Traceback (most recent call last):\n  File \"train.py\"\nRuntimeError: boom")
    findings = diagnose(run)
    assert [f.code for f in findings] == ["GD-RUN-CRASHED", "GD-RUN-NO-STEPS"]
    assert findings[0].evidence[-1] == "RuntimeError: boom"


def test_thresholds_are_honoured(build):
    run = build.run(steps_by_rank={0: build.steps(data_wait_ms=3.0)})  # 7.5%
    assert not diagnose(run)
    loose = Thresholds(data_wait_min_share=0.05, warn_gain=0.05)
    assert [f.code for f in diagnose(run, thresholds=loose)] == ["GD-RUN-DATALOADER"]
