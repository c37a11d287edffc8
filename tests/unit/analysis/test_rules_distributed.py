"""set_epoch, shared GPU, exposed communication and straggler rules on hand-built 2-rank runs."""

from __future__ import annotations

from gpudoctor.analysis.diagnose import diagnose
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
