"""set_epoch, shared GPU, exposed communication and straggler rules on hand-built 2-rank runs."""

from __future__ import annotations

import pytest

from gpudoctor.analysis.diagnose import diagnose
from gpudoctor.analysis.thresholds import Thresholds
from gpudoctor.records.finding import Severity


def by_code(findings):
    return {f.code: f for f in findings}


def two_ranks(build, *, cfg0=None, cfg1=None, win0=None, win1=None, st0=None, st1=None, gpu=None):
    return build.run(
        steps_by_rank={0: st0 or build.steps(rank=0), 1: st1 or build.steps(rank=1)},
        configs={0: build.config(0, world_size=2, **(cfg0 or {})),
                 1: build.config(1, world_size=2, **(cfg1 or {}))},
        windows={0: build.window(0, **(win0 or {})), 1: build.window(1, **(win1 or {}))},
        gpu=gpu if gpu is not None else build.gpu_samples(index=0, pids=(1000,))
        + build.gpu_samples(index=1, pids=(1001,)),
        world_size=2)


def test_clean_two_ranks_are_silent(build):
    assert not diagnose(two_ranks(build))


def test_missing_set_epoch(build):
    loader = build.loader(sampler="DistributedSampler", set_epoch_called=False, epochs_started=3)
    f = by_code(diagnose(two_ranks(build, cfg0={"loaders": (loader,)})))["GD-RUN-NO-SET-EPOCH"]
    assert f.severity is Severity.WARN
    assert f.evidence == ("rank 0: DistributedSampler over InMemoryImages (20000 samples), "
                          "3 epoch(s) started, set_epoch never called",)
    assert "sampler.set_epoch(epoch)" in f.fix


def test_set_epoch_called_or_not_distributed(build):
    called = build.loader(sampler="DistributedSampler", set_epoch_called=True, epochs_started=3)
    assert not diagnose(two_ranks(build, cfg0={"loaders": (called,)}))
    plain = build.loader(set_epoch_called=None)
    assert not diagnose(two_ranks(build, cfg0={"loaders": (plain,)}))


def test_all_ranks_on_gpu0(build):
    gpu = build.gpu_samples(index=0, pids=(1000, 1001)) + build.gpu_samples(index=1, pids=())
    run = two_ranks(build, cfg1={"cuda_device_index": 0, "device": "cuda:0"}, gpu=gpu)
    f = diagnose(run)[0]
    assert (f.code, f.severity) == ("GD-RUN-SAME-GPU", Severity.ERROR)
    assert f.evidence == ("ranks 0, 1 all ran on GPU 0", "GPUs sampled on this machine: 2")
    assert "torch.cuda.set_device(local_rank)" in f.fix


def test_same_index_under_per_rank_visible_devices_is_fine(build):
    # each rank sees its own GPU as cuda:0; NVML shows them on different GPUs
    run = two_ranks(build, cfg1={"cuda_device_index": 0, "device": "cuda:0"},
                    cfg0={"cuda_device_index": 0})
    assert not diagnose(run)


def test_same_gpu_from_config_without_nvml(build):
    run = two_ranks(build, cfg1={"cuda_device_index": 0, "device": "cuda:0"}, gpu=[])
    assert diagnose(run)[0].code == "GD-RUN-SAME-GPU"


def test_comm_exposed(build):
    win = {"nccl_ms": 50.0, "nccl_overlap_frac": 0.2}
    f = by_code(diagnose(two_ranks(build, win0=win, win1=win)))["GD-RUN-DDP-COMM-EXPOSED"]
    assert (f.severity, f.expected_gain) == (Severity.WARN, 0.2)
    assert f.evidence[1] == "exposed communication 8.00 ms of a 40.00 ms step"


def test_overlapped_comm_is_silent(build):
    win = {"nccl_ms": 50.0, "nccl_overlap_frac": 0.95}
    assert not diagnose(two_ranks(build, win0=win, win1=win))


def test_straggler_from_nccl_wait(build):
    run = two_ranks(build, win0={"nccl_ms": 100.0, "nccl_overlap_frac": 0.0},
                    win1={"nccl_ms": 10.0, "nccl_overlap_frac": 0.0})
    findings = diagnose(run)
    assert findings[0].code == "GD-RUN-STRAGGLER"
    assert findings[0].expected_gain == 0.45  # (20 - 2) ms per step / 40 ms
    assert findings[0].title.startswith("Straggler: rank 1 is slower")
    assert "GD-RUN-DDP-COMM-EXPOSED" not in by_code(findings)  # rank 1 exposes only 2 ms


def test_window_wait_longer_than_a_step_is_a_one_off_not_a_straggler(build):
    # 5 window steps, rank 0 exposed 300 ms of NCCL wait: 60 ms "per step" against 40 ms steps
    # cannot recur every step (on 2 x H200: profiler start skew between the ranks)
    run = two_ranks(build, win0={"nccl_ms": 300.0, "nccl_overlap_frac": 0.0},
                    win1={"nccl_ms": 0.5, "nccl_overlap_frac": 0.0})
    assert "GD-RUN-STRAGGLER" not in by_code(diagnose(run))


def test_recorded_one_off_window_wait_on_two_h200(build):
    from pathlib import Path

    from gpudoctor.records.rundir import load_run

    run = load_run(Path(__file__).resolve().parents[2] / "fixtures" / "runs" / "ddp_no_set_epoch-2gpu")
    waits = sorted(w.nccl_ms for w in run.windows.values())
    assert waits[1] > 5 * 2.31  # 27.4 ms in 5 steps on one rank: more than a step each
    assert "GD-RUN-STRAGGLER" not in by_code(diagnose(run))


def test_straggler_from_unsynchronised_step_times(build):
    run = two_ranks(build, st1=build.steps(rank=1, step_ms=60.0, gpu_ms=38.0))
    f = by_code(diagnose(run))["GD-RUN-STRAGGLER"]
    assert f.expected_gain == 0.4  # (60 - 40) / median 50


def test_same_gpu_from_config_when_nvml_pids_do_not_match(build):
    # NVML in a container lists host PIDs: fall back to the ranks' own device indices
    gpu = build.gpu_samples(index=0, pids=(51000,)) + build.gpu_samples(index=1, pids=())
    run = two_ranks(build, cfg1={"cuda_device_index": 0, "device": "cuda:0"}, gpu=gpu)
    assert diagnose(run)[0].code == "GD-RUN-SAME-GPU"


def test_same_gpu_by_uuid(build):
    run = two_ranks(build, cfg0={"cuda_device_uuid": "GPU-aaaa"},
                    cfg1={"cuda_device_uuid": "GPU-aaaa", "cuda_device_index": 0}, gpu=[])
    f = diagnose(run)[0]
    assert f.evidence[0] == "ranks 0, 1 all ran on GPU 0 (GPU-aaaa)"
    assert f.title == "2 ranks share GPU 0: each gets a fraction of one GPU"
    distinct = two_ranks(build, cfg0={"cuda_device_uuid": "GPU-aaaa", "cuda_device_index": 0},
                         cfg1={"cuda_device_uuid": "GPU-bbbb", "cuda_device_index": 0})
    assert not diagnose(distinct)


def test_same_index_through_different_visible_devices_is_fine(build):
    run = two_ranks(build, cfg0={"cuda_device_index": 0, "cuda_visible_devices": "0"},
                    cfg1={"cuda_device_index": 0, "cuda_visible_devices": "1"}, gpu=[])
    assert not diagnose(run)


def cpu_ranks(build, n, ms0, ms1):
    """Two gloo ranks on the CPU (no window, no GPU): only the step-time signal."""
    cpu = {"device": "cpu", "cuda_device_index": None, "autocast_dtypes": ()}
    return build.run(
        steps_by_rank={0: build.steps(rank=0, n=n, step_ms=ms0, gpu_ms=None, mem=None),
                       1: build.steps(rank=1, n=n, step_ms=ms1, gpu_ms=None, mem=None)},
        configs={0: build.config(0, world_size=2, **cpu), 1: build.config(1, world_size=2, **cpu)},
        windows={}, gpu=[], world_size=2)


def test_straggler_needs_enough_steady_steps(build):
    # 12 steps: 7 after warm-up; start/end skew alone can make one rank's mean 10% slower
    short = cpu_ranks(build, 12, 40.0, 60.0)
    assert "GD-RUN-STRAGGLER" not in by_code(diagnose(short))
    assert "GD-RUN-STRAGGLER" in by_code(
        diagnose(short, thresholds=Thresholds(straggler_min_steps=0)))
    # 25 steps keep 20 after warm-up: a 20 ms per-step difference is then a straggler
    f = by_code(diagnose(cpu_ranks(build, 25, 40.0, 60.0)))["GD-RUN-STRAGGLER"]
    assert f.title.startswith("Straggler: rank 1 is slower")
    assert f.evidence[1] == "median step 50.00 ms over 2 ranks, 20 steady steps each"


def test_straggler_ignores_a_difference_of_one_scheduler_slice(build):
    # the 2-rank gloo run on 2 busy CPU cores: 4.67 vs 3.01 ms is 43% but only 1.7 ms a step
    noisy = cpu_ranks(build, 60, 4.67, 3.01)
    assert "GD-RUN-STRAGGLER" not in by_code(diagnose(noisy))
    assert "GD-RUN-STRAGGLER" in by_code(diagnose(noisy, thresholds=Thresholds(straggler_min_ms=0.0)))
    # the same share at 10x the step time is 16.6 ms a step: a straggler
    assert "GD-RUN-STRAGGLER" in by_code(diagnose(cpu_ranks(build, 60, 46.7, 30.1)))


def test_straggler_nccl_wait_needs_the_floor_too(build):
    # rank 0 waits 1.5 ms more per step in NCCL than rank 1: 37.5% of a 4 ms step, under 2 ms
    st = {r: build.steps(rank=r, step_ms=4.0, gpu_ms=3.8, data_wait_ms=0.04, h2d_ms=0.01)
          for r in (0, 1)}
    run = two_ranks(build, st0=st[0], st1=st[1],
                    win0={"wall_ms": 20.0, "nccl_ms": 10.0, "nccl_overlap_frac": 0.0},
                    win1={"wall_ms": 20.0, "nccl_ms": 2.5, "nccl_overlap_frac": 0.0})
    assert "GD-RUN-STRAGGLER" not in by_code(diagnose(run))
    no_floor = diagnose(run, thresholds=Thresholds(straggler_min_ms=0.0))
    assert by_code(no_floor)["GD-RUN-STRAGGLER"].expected_gain == 0.375


def gloo_ranks(build, n, gloo0, gloo1, step_ms=30.0):
    """Two gloo DDP ranks on the CPU in lockstep: equal step times, profiler windows of 5 steps
    holding ``gloo0``/``gloo1`` ms of gloo collectives per step (no device activity)."""
    cpu = {"device": "cpu", "cuda_device_index": None, "autocast_dtypes": ()}
    no_gpu = dict(gpu_busy_ms=None, gpu_busy_frac=None, kernel_count=0, kernel_us_p50=None,
                  kernel_us_p90=None, kernels_under_10us_frac=None, launch_count=0, wall_ms=5 * step_ms)
    return build.run(
        steps_by_rank={r: build.steps(rank=r, n=n, step_ms=step_ms, gpu_ms=None, mem=None) for r in (0, 1)},
        configs={r: build.config(r, world_size=2, **cpu) for r in (0, 1)},
        windows={0: build.window(0, gloo_ms=5 * gloo0, **no_gpu), 1: build.window(1, gloo_ms=5 * gloo1, **no_gpu)},
        gpu=[], world_size=2)


def test_straggler_on_gloo_from_collective_wait(build):
    # measured on the CPU: rank 0 spent 21 ms a step in gloo:all_reduce, the sleeping rank 1 3.7 ms
    f = by_code(diagnose(gloo_ranks(build, 60, 21.0, 3.7)))["GD-RUN-STRAGGLER"]
    assert f.title.startswith("Straggler: rank 1 is slower")
    assert f.evidence[0] == "gloo wait per step: rank 0: 21.00 ms, rank 1: 3.70 ms"
    assert f.expected_gain == pytest.approx((21.0 - 3.7) / 30.0, abs=1e-4)  # gains are kept to 4 places


def test_straggler_whose_wait_the_profiler_stretched_past_an_unprofiled_step(build):
    # 2 gloo ranks on 2 busy CPU cores, the slow one sleeping 20 ms a step: 26 ms steps, but the
    # profiler slows the window's steps to 31 ms and the wait grows with them (27 ms a window
    # step against 1 ms on the sleeper); a one-off would sit in one window step, not in every one
    def stretched(i):
        return 31.0 if 10 <= i <= 14 else 26.0
    run = gloo_ranks(build, 60, 28.0, 1.0, step_ms=26.0)
    slowed = build.run(steps_by_rank={r: build.steps(rank=r, n=60, step_ms=stretched, gpu_ms=None, mem=None)
                                      for r in (0, 1)},
                       configs=run.configs, windows=run.windows, gpu=[], world_size=2)
    f = by_code(diagnose(slowed))["GD-RUN-STRAGGLER"]
    assert f.title.startswith("Straggler: rank 1 is slower")
    # with the window's steps as fast as the others, 27 ms a step is more than a step: a one-off
    assert "GD-RUN-STRAGGLER" not in by_code(diagnose(run))


def test_straggler_on_gloo_keeps_the_floor_and_the_steady_steps(build):
    # 1.5 ms a step more in gloo: 37.5% of a 4 ms step, but under the 2 ms floor
    small = gloo_ranks(build, 60, 2.0, 0.5, step_ms=4.0)
    assert "GD-RUN-STRAGGLER" not in by_code(diagnose(small))
    assert "GD-RUN-STRAGGLER" in by_code(diagnose(small, thresholds=Thresholds(straggler_min_ms=0.0)))
    short = gloo_ranks(build, 12, 21.0, 3.7)
    assert "GD-RUN-STRAGGLER" not in by_code(diagnose(short))
    assert "GD-RUN-STRAGGLER" in by_code(diagnose(short, thresholds=Thresholds(straggler_min_steps=0)))
