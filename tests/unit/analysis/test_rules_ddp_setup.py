"""DDP without DistributedSampler and DataParallel, on hand-built runs."""

from __future__ import annotations

import pytest

from gpudoctor.analysis.diagnose import diagnose
from gpudoctor.records.finding import Severity

SAMPLER = "GD-RUN-NO-DIST-SAMPLER"
DP = "GD-RUN-DATA-PARALLEL"


def by_code(findings):
    return {f.code: f for f in findings}


def ranks(build, n=2, kind="ddp", **loader):
    lo = build.loader(**loader)
    return build.run(
        steps_by_rank={r: build.steps(rank=r) for r in range(n)},
        configs={r: build.config(r, world_size=n, ddp=build.DdpConfig(kind=kind), loaders=(lo,))
                 for r in range(n)},
        windows={r: build.window(r) for r in range(n)},
        gpu=sum((build.gpu_samples(index=r, pids=(1000 + r,)) for r in range(n)), []),
        world_size=n)


@pytest.mark.parametrize("kind", ["ddp", "fsdp", "fsdp2"])
def test_sharded_run_without_distributed_sampler(build, kind):
    f = by_code(diagnose(ranks(build, kind=kind)))[SAMPLER]
    assert f.severity is Severity.WARN and f.expected_gain is None
    assert f.title == f"{kind.upper()} without DistributedSampler: every rank loads the whole dataset"
    assert f.evidence[0] == (f"rank 0 ({kind}, world size 2): its training loader iterates "
                             "InMemoryImages of 20000 samples with RandomSampler, not a DistributedSampler")
    assert f.evidence[1].startswith("ranks affected: 0, 1; ")
    assert "DistributedSampler(dataset" in f.fix and "sampler.set_epoch(epoch)" in f.fix


def test_the_main_loader_decides(build):
    """An evaluation loader without a DistributedSampler is not the training loader."""
    train = build.loader(sampler="DistributedSampler", set_epoch_called=True, batches=500)
    evaluation = build.loader(sampler="SequentialSampler", batches=20)
    run = ranks(build)
    run.configs[0] = build.config(0, world_size=2, ddp=build.DdpConfig(kind="ddp"), loaders=(evaluation, train))
    run.configs[1] = build.config(1, world_size=2, ddp=build.DdpConfig(kind="ddp"), loaders=(train,))
    assert SAMPLER not in by_code(diagnose(run))
    run.configs[1] = build.config(1, world_size=2, ddp=build.DdpConfig(kind="ddp"),
                                  loaders=(build.loader(batches=500),))
    f = by_code(diagnose(run))[SAMPLER]
    assert f.evidence[0].startswith("rank 1 (ddp, world size 2)") and "ranks affected: 1;" in f.evidence[1]


@pytest.mark.parametrize("case", [
    dict(sampler="DistributedSampler", set_epoch_called=True),   # the fix
    dict(sampler="ShardedSampler", set_epoch_called=True),       # a sampler that shards (num_replicas + set_epoch)
    dict(sampler="_InfiniteConstantSampler", dataset="Shards"),  # an IterableDataset shards itself
])
def test_sharding_samplers_are_silent(build, case):
    assert SAMPLER not in by_code(diagnose(ranks(build, **case)))


def test_one_rank_or_no_ddp_is_silent(build):
    assert SAMPLER not in by_code(diagnose(ranks(build, n=1)))
    run = ranks(build)
    for r in (0, 1):
        run.configs[r] = build.config(r, world_size=2, loaders=(build.loader(),))  # no DDP wrapper
    assert SAMPLER not in by_code(diagnose(run))


def test_data_parallel_on_gpus(build):
    cfg = build.config(ddp=build.DdpConfig(kind="dp", device_ids=(0, 1, 2, 3)))
    f = by_code(diagnose(build.run(configs={0: cfg})))[DP]
    assert f.severity is Severity.WARN and f.expected_gain is None
    assert f.title == "DataParallel: one process drives all the GPUs; DDP is faster"
    assert f.evidence == ("rank 0: torch.nn.DataParallel over 4 GPU(s) (device_ids [0, 1, 2, 3]), in one process",)
    assert "torchrun --nproc_per_node" in f.fix and "DDP(model.to(local_rank)" in f.fix


def test_data_parallel_without_cuda_is_a_note(build):
    cfg = build.config(device="cpu", cuda_device_index=None, ddp=build.DdpConfig(kind="dp"))
    f = by_code(diagnose(build.run(configs={0: cfg}, windows={}, gpu=[])))[DP]
    assert f.severity is Severity.INFO
    assert f.evidence == ("rank 0: torch.nn.DataParallel over every visible GPU, in one process",
                          "this run had no CUDA device: DataParallel only wrapped the module")


def test_data_parallel_over_one_gpu_is_a_note_not_the_verdict(build):
    # pytorch/examples' imagenet script wraps its model in DataParallel on a one-GPU machine; on
    # an H200 its verdict was data-loader bound, and the loader fix measured +23%: a WARN here
    # would out-rank it (correctness findings come first)
    cfg = build.config(ddp=build.DdpConfig(kind="dp", device_ids=(0,)))
    run = build.run(configs={0: cfg}, steps_by_rank={0: build.steps(data_wait_ms=20.0)},
                    windows={0: build.window(gpu_busy_frac=0.45)})
    findings = diagnose(run)
    assert by_code(findings)[DP].severity is Severity.INFO
    assert findings[0].code == "GD-RUN-DATALOADER"


def test_ddp_is_not_data_parallel(build):
    assert DP not in by_code(diagnose(ranks(build, sampler="DistributedSampler", set_epoch_called=True)))
