"""The breakdown on the GPU timeline (GPU-bound runs are compute, not sync), MFU, the rank policy
and the periodic-stall rule."""

from __future__ import annotations

import pytest

from gpudoctor.analysis.diagnose import diagnose
from gpudoctor.analysis.facts import run_facts
from gpudoctor.analysis.thresholds import Thresholds
from gpudoctor.records.finding import Severity
from gpudoctor.records.run import OpStat

FP32 = dict(autocast_dtypes=(), tf32_matmul=False, cudnn_benchmark=False, channels_last=False)


def by_code(findings):
    return {f.code: f for f in findings}


def test_a_gpu_bound_run_is_compute_not_sync(build):
    # The case: 235 ms of GPU work per step; the host runs ahead and blocks in a full
    # launch queue and at the window's end (sync 1,000 ms); the window's host span (249 ms) is a
    # fifth of the GPU work in it (1,175 ms)
    run = build.run(
        steps_by_rank={0: build.steps(step_ms=235.0, gpu_ms=235.0, data_wait_ms=0.2, h2d_ms=0.05)},
        configs={0: build.config(**FP32)},
        windows={0: build.window(wall_ms=249.0, gpu_busy_ms=1175.0, gpu_busy_frac=None,
                                 sync_calls=1, sync_ms=1000.0, kernel_ms=1170.0, memcpy_ms=0.5,
                                 flops=5 * 235e-3 * 40e12)},  # 40 TFLOP/s achieved
    )
    facts = run_facts(run, Thresholds())
    rf = facts.ranks[0]
    b = rf.breakdown
    assert b.gpu_timeline and rf.busy_frac == 1.0
    assert b.share("compute") >= 0.99 and b.host_ms == 0 and b.data_ms == 0
    findings = diagnose(run)
    assert findings[0].code == "GD-RUN-FP32-COMPUTE" and findings[0].severity is Severity.WARN
    mfu = next(e for e in findings[0].evidence if "MFU" in e)
    # 40 TFLOP/s in fp32 on an H200 (66.9 TFLOP/s): 59.8% MFU, and the bf16 peak quoted
    assert mfu.startswith("40.0 TFLOP/s achieved in fp32") and "59.8%" in mfu and "989.4" in mfu
    assert "GD-RUN-HOST-SYNC" not in by_code(findings)


def test_tf32_kernels_set_the_precision_of_an_fp32_conv_net(build):
    k = OpStat(name="sm90_xmma_fprop_implicit_gemm_f32f32_tf32f32_f32_nhwckrsc", count=5, total_us=1e5,
               kind="kernel")
    run = build.run(configs={0: build.config(**FP32)},
                    windows={0: build.window(flops=5 * 40e-3 * 100e12, top_kernels=(k,))})
    fp32 = by_code(diagnose(run))["GD-RUN-FP32-COMPUTE"]
    assert any(e.startswith("100.0 TFLOP/s achieved in tf32") and "494.7" in e for e in fp32.evidence)


def test_a_data_wait_while_the_gpu_idles_is_data(build):
    run = build.run(steps_by_rank={0: build.steps(data_wait_ms=20.0)},
                    windows={0: build.window(gpu_busy_frac=0.45)})
    b = run_facts(run, Thresholds()).ranks[0].breakdown
    assert b.data_ms == pytest.approx(20.0) and b.compute_ms == pytest.approx(18.0)
    assert b.step_ms == pytest.approx(b.data_ms + b.copy_ms + b.compute_ms + b.comm_ms + b.host_ms)


def test_a_fast_rank_waits_in_the_collective_for_the_slow_one(build):
    # rank 1 does 28 ms of host work a step; rank 0 spends that time inside the all-reduce
    run = build.run(
        steps_by_rank={0: build.steps(0, n=40), 1: build.steps(1, n=40)},
        configs={0: build.config(0, world_size=2), 1: build.config(1, world_size=2)},
        windows={0: build.window(0, gpu_busy_ms=200.0, nccl_ms=150.0, nccl_overlap_frac=0.0),
                 1: build.window(1, gpu_busy_ms=60.0, nccl_ms=10.0, nccl_overlap_frac=0.0)},
        world_size=2)
    r0, r1 = run_facts(run, Thresholds()).ranks
    assert r0.breakdown.comm_ms == pytest.approx(30.0) and r0.breakdown.host_ms == 0
    assert r1.breakdown.host_ms == pytest.approx(40.0 - 12.0 - 0.4 - 0.1)
    straggler = by_code(diagnose(run))["GD-RUN-STRAGGLER"]
    assert straggler.title.startswith("Straggler: rank 1 is slower")


def test_rules_judge_every_rank_and_name_the_worst(build):
    # a 64 MiB/step leak planted on rank 1 only
    leaky = build.steps(1, mem=lambda i: build.mem(allocated=2 * build.GIB + i * 64 * build.MIB))
    run = build.run(steps_by_rank={0: build.steps(0), 1: leaky},
                    configs={0: build.config(0, world_size=2), 1: build.config(1, world_size=2)},
                    windows={0: build.window(0), 1: build.window(1)}, world_size=2)
    leak = by_code(diagnose(run))["GD-RUN-MEM-LEAK"]
    assert leak.evidence[0].endswith("rank 1")
    assert leak.evidence[-1] == "rank 1 of 2 is the worst; the other ranks do not show it"


def _stall_steps(build, every: int, extra_ms: float, *, wait: bool, n: int = 60):
    slow = lambda i: i % every == every - 1  # noqa: E731
    return build.steps(n=n, step_ms=lambda i: 40.0 + (extra_ms if slow(i) else 0.0),
                       data_wait_ms=lambda i: 0.4 + (extra_ms if wait and slow(i) else 0.0))


def test_a_loader_stall_every_ten_steps_is_the_loader_finding_with_its_period(build):
    run = build.run(steps_by_rank={0: _stall_steps(build, 10, 100.0, wait=True)},
                    windows={0: build.window(gpu_busy_frac=0.5)})
    found = by_code(diagnose(run))
    # workers that fall behind every 10 batches: the mean data wait counts those steps, and the
    # loader finding's fix is theirs; the stall rule does not name them a second time
    assert "GD-RUN-PERIODIC-STALL" not in found
    f = found["GD-RUN-DATALOADER"]
    assert "every ~10 steps: 6 of 49 steps wait 100.00 ms more than the median" in " ".join(f.evidence)


def test_a_stall_of_host_work_every_ten_steps_is_named_with_its_period(build):
    run = build.run(steps_by_rank={0: _stall_steps(build, 10, 100.0, wait=False)},
                    windows={0: build.window(gpu_busy_frac=0.5)})
    f = by_code(diagnose(run))["GD-RUN-PERIODIC-STALL"]
    assert f.title.startswith("Periodic stalls: every ~10 steps a step does extra host work")
    # steady steps: 6-59 without the profiled 10-14 (49); 6 of them (9, 19, ... 59) take 140 ms:
    # 600 ms beyond the median out of 2,560 ms
    assert f.expected_gain == pytest.approx(600 / (49 * 40 + 600), abs=1e-4)
    assert f.severity is Severity.WARN


def test_stall_steps_are_the_long_ones_not_the_jitter_beside_them(build):
    # pytorch/examples' dcgan on an H200, in shape: an epoch every 16 steps ends with 400 ms of
    # checkpointing and image saving, and loader jitter doubles a few other steps
    jitter = {20, 24, 38, 44, 51, 57}
    step_ms = lambda i: 400.0 if i % 16 == 15 else (40.0 if i in jitter else 20.0)  # noqa: E731
    loader = build.loader(num_workers=2, persistent_workers=False, dataset_len=1000, batch_size=64)
    run = build.run(steps_by_rank={0: build.steps(n=64, step_ms=step_ms)},
                    configs={0: build.config(loaders=(loader,))},
                    windows={0: build.window(gpu_busy_frac=0.2)})
    found = by_code(diagnose(run))
    f = found["GD-RUN-PERIODIC-STALL"]
    assert "every ~16 steps a step does the work of an epoch boundary" in f.title
    assert "persistent_workers=True" in f.fix
    # the host time of the stalls is the stall rule's, not launch overhead's
    launch = found.get("GD-RUN-LAUNCH-BOUND")
    assert launch is None or launch.expected_gain < f.expected_gain


def test_a_stall_at_each_epoch_of_non_persistent_workers_prescribes_persistent_workers(build):
    loader = build.loader(num_workers=4, persistent_workers=False, dataset_len=2560, batch_size=256)
    run = build.run(steps_by_rank={0: _stall_steps(build, 10, 100.0, wait=True)},
                    configs={0: build.config(loaders=(loader,))},
                    windows={0: build.window(gpu_busy_frac=0.5)})
    f = by_code(diagnose(run))["GD-RUN-PERIODIC-STALL"]
    assert "restart at the start of an epoch" in f.title
    assert "persistent_workers=True" in f.fix
    data = dict(f.data)  # what gpudoctor fix plans from: the whole stall is the workers' restart
    assert data["worker_restart"] == 1.0 and data["epoch_steps"] == 10
    assert data["first_batch_wait_ms"] == pytest.approx(100.0) and "epoch_work_ms" not in data


def test_an_epoch_boundary_stall_carries_its_measured_parts_as_data():
    # pytorch/examples' dcgan recorded on an H200: the parts the evidence names, as numbers
    import json
    from pathlib import Path

    from gpudoctor.records.base import from_dict, to_dict
    from gpudoctor.records.finding import Finding
    from gpudoctor.records.rundir import load_run

    run = load_run(Path(__file__).resolve().parents[2] / "fixtures" / "runs_corpus" / "dcgan")
    f = by_code(diagnose(run))["GD-RUN-PERIODIC-STALL"]
    data = dict(f.data)
    assert data["worker_restart"] == 1.0 and data["epoch_steps"] == 16
    assert data["boundary_ms"] == pytest.approx(
        data["first_batch_wait_ms"] + data["sync_ms"] + data["host_work_ms"], abs=0.02)
    assert data["epoch_work_ms"] == pytest.approx(data["sync_ms"] + data["host_work_ms"], abs=0.02)
    for name in ("first_batch_wait_ms", "sync_ms", "host_work_ms", "boundary_ms"):
        assert f"{data[name]:.2f} ms" in " ".join(f.evidence)  # the same figures the text quotes
    assert f"({data['epoch_work_ms']:.2f} ms an epoch)" in f.fix
    assert from_dict(Finding, json.loads(json.dumps(to_dict(f)))) == f  # findings.json keeps the parts


def test_persistent_workers_leave_no_restart_part(build):
    # the same checkpoint-bound epochs with workers kept alive: the parts carry no restart
    step_ms = lambda i: 400.0 if i % 16 == 15 else 20.0  # noqa: E731
    loader = build.loader(num_workers=2, persistent_workers=True, dataset_len=1000, batch_size=64)
    run = build.run(steps_by_rank={0: build.steps(n=64, step_ms=step_ms)},
                    configs={0: build.config(loaders=(loader,))},
                    windows={0: build.window(gpu_busy_frac=0.2)})
    data = dict(by_code(diagnose(run))["GD-RUN-PERIODIC-STALL"].data)
    assert data["worker_restart"] == 0.0 and data["epoch_work_ms"] > 0


def test_bimodal_steps_are_not_stalls(build):
    # a GPU-bound host alternating between a full and a draining launch queue: 40% long steps
    run = build.run(steps_by_rank={0: build.steps(n=60, step_ms=lambda i: 70.0 if i % 5 in (1, 3) else 20.0)},
                    windows={0: build.window(gpu_busy_frac=0.5)})
    assert "GD-RUN-PERIODIC-STALL" not in by_code(diagnose(run))


def test_scattered_slow_steps_without_a_cause_are_noise(build):
    slow = {7, 9, 23, 41}
    run = build.run(steps_by_rank={0: build.steps(n=60, step_ms=lambda i: 120.0 if i in slow else 40.0)},
                    windows={0: build.window(gpu_busy_frac=0.5)})
    assert "GD-RUN-PERIODIC-STALL" not in by_code(diagnose(run))


def test_slow_steps_hidden_by_a_busy_gpu_are_not_stalls(build):
    run = build.run(steps_by_rank={0: _stall_steps(build, 10, 100.0, wait=False)},
                    windows={0: build.window(gpu_busy_ms=260.0)})  # busy through them
    assert "GD-RUN-PERIODIC-STALL" not in by_code(diagnose(run))


def _kernel(name: str, ms_per_step: float) -> OpStat:
    return OpStat(name=name, count=5, total_us=ms_per_step * 5 * 1000, kind="kernel")


def test_layout_conversions_of_a_conv_net_are_the_channels_last_gain(build):
    kernels = (_kernel("sm90_xmma_fprop_implicit_gemm_bf16bf16_bf16f32_f32_nhwckrsc_nhwc", 20.0),
               _kernel("void cudnn::engines_precompiled::nchwToNhwcKernel<float>", 6.0),
               _kernel("void cudnn::engines_precompiled::nhwcToNchwKernel<float>", 2.0))
    run = build.run(configs={0: build.config(channels_last=False, cudnn_benchmark=False)},
                    windows={0: build.window(top_kernels=kernels)})
    found = by_code(diagnose(run))
    # under bf16 autocast too: 8 ms of conversions per 40 ms step
    assert found["GD-RUN-CHANNELS-LAST"].expected_gain == 0.2
    assert "memory_format=torch.channels_last" in found["GD-RUN-CHANNELS-LAST"].fix
    assert found["GD-RUN-CUDNN-BENCHMARK"].severity is Severity.INFO


def test_channels_last_nets_and_non_conv_nets_get_no_layout_finding(build):
    kernels = (_kernel("nvjet_sm90_tst_128x256_64x4", 30.0),)
    mlp = build.run(configs={0: build.config(channels_last=None, cudnn_benchmark=False)},
                    windows={0: build.window(top_kernels=kernels)})
    assert not {"GD-RUN-CHANNELS-LAST", "GD-RUN-CUDNN-BENCHMARK"} & set(by_code(diagnose(mlp)))
    conv = (_kernel("sm90_xmma_fprop_implicit_gemm_f32", 20.0), _kernel("nchwToNhwcKernel", 6.0))
    done = build.run(windows={0: build.window(top_kernels=conv)})  # channels_last, benchmark on
    assert not {"GD-RUN-CHANNELS-LAST", "GD-RUN-CUDNN-BENCHMARK"} & set(by_code(diagnose(done)))


def test_recompiling_after_warm_up_is_named_with_its_cost(build):
    # the last batch of each 20-step epoch is smaller: a recompile and a 2 s step each time
    steps = build.steps(n=60, compiles=lambda i: 1 if i in (0, 19, 39, 59) else 0,
                        step_ms=lambda i: 2040.0 if i in (0, 19, 39, 59) else 40.0)
    run = build.run(steps_by_rank={0: steps})
    f = by_code(diagnose(run))["GD-RUN-RECOMPILE"]
    # steady steps 6-59 less the window 10-14: 19, 39 and 59 recompiled (step 0 is warm-up)
    assert f.severity is Severity.WARN and f.title.startswith("torch.compile recompiled 3 frame(s)")
    assert f.expected_gain == pytest.approx(3 * 2000 / (49 * 40 + 3 * 2000), abs=1e-4)
    assert "drop_last=True" in f.fix
    assert "GD-RUN-PERIODIC-STALL" not in by_code(diagnose(run))  # the same slow steps, explained


def test_compiling_only_in_warm_up_is_silent(build):
    run = build.run(steps_by_rank={0: build.steps(compiles=lambda i: 2 if i < 2 else 0)})
    assert "GD-RUN-RECOMPILE" not in by_code(diagnose(run))
