"""Builders of hand-made run data for the rule tests: a tuned GPU run by default, any field
overridable, so each test states only what it plants."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpudoctor.records.gpu import GpuProcess, GpuSample
from gpudoctor.records.memory import AllocatorStats
from gpudoctor.records.run import DdpConfig, LoaderConfig, RankConfig, RunManifest, WindowSummary
from gpudoctor.records.rundir import RunData
from gpudoctor.records.step import StepRecord
from gpudoctor.records.units import GIB, MIB


def loader(**kw) -> LoaderConfig:
    base = dict(num_workers=8, pin_memory=True, persistent_workers=True, prefetch_factor=4,
                batch_size=256, drop_last=True, sampler="RandomSampler", dataset="InMemoryImages",
                dataset_len=20000, epochs_started=1)
    base.update(kw)
    return LoaderConfig(**base)


def config(rank: int = 0, **kw) -> RankConfig:
    base = dict(rank=rank, local_rank=rank, world_size=1, pid=1000 + rank, device=f"cuda:{rank}",
                device_name="NVIDIA H200", cuda_device_index=rank, cudnn_benchmark=True,
                tf32_matmul=True, tf32_cudnn=True, autocast_dtypes=("bfloat16",),
                channels_last=True, param_dtypes=("float32",), optimizer="SGD",
                optimizer_fused=True, loaders=(loader(),), gpu_total_memory_bytes=140 * GIB,
                usable_cpus=16, local_world_size=1)
    base.update(kw)
    return RankConfig(**base)


def mem(allocated: int = 2 * GIB, reserved: int = 6 * GIB, peak: int = 5 * GIB,
        peak_reserved: int = 6 * GIB, retries: int = 0, ooms: int = 0) -> AllocatorStats:
    return AllocatorStats(allocated_bytes=allocated, reserved_bytes=reserved,
                          peak_allocated_bytes=peak, peak_reserved_bytes=peak_reserved,
                          alloc_retries=retries, ooms=ooms)


def steps(rank: int = 0, n: int = 30, **kw) -> list[StepRecord]:
    """``n`` identical steps; a callable value gets the step index (for trends)."""
    base = dict(step_ms=40.0, data_wait_ms=0.4, h2d_ms=0.1, gpu_ms=38.0, h2d_bytes=3 * MIB,
                h2d_pageable_bytes=0, h2d_copies=2, h2d_blocking_copies=0, host_syncs=0,
                samples=256, loss=2.3, loss_finite=True, mem=mem())
    base.update(kw)
    out = []
    for i in range(n):
        fields = {k: (v(i) if callable(v) else v) for k, v in base.items()}
        out.append(StepRecord(rank=rank, step=i, t_end_s=1000.0 + i * 0.04, **fields))
    return out


def window(rank: int = 0, **kw) -> WindowSummary:
    base = dict(rank=rank, first_step=10, last_step=14, wall_ms=200.0, gpu_busy_ms=184.0,
                gpu_busy_frac=0.92, kernel_count=1500, kernel_us_p50=45.0, kernel_us_p90=300.0,
                kernels_under_10us_frac=0.2, sync_calls=0, sync_ms=0.0, launch_count=1500)
    base.update(kw)
    if "gpu_busy_frac" in kw and "gpu_busy_ms" not in kw and kw["gpu_busy_frac"] is not None:
        # a test that plants a busy share means a share of the window's steps
        base["gpu_busy_ms"] = kw["gpu_busy_frac"] * base["wall_ms"]
    return WindowSummary(**base)


def gpu_samples(n: int = 10, index: int = 0, pids: tuple[int, ...] = (1000,), **kw) -> list[GpuSample]:
    base = dict(name="NVIDIA H200", util_gpu_pct=95.0, mem_total_bytes=140 * GIB,
                mem_used_bytes=8 * GIB, power_w=500.0, power_limit_w=700.0)
    base.update(kw)
    return [GpuSample(timestamp_s=1000.0 + i, index=index,
                      processes=tuple(GpuProcess(pid=p, used_memory_bytes=GIB) for p in pids),
                      **base) for i in range(n)]


def run(*, steps_by_rank=None, configs=None, windows=None, gpu=None, **manifest) -> RunData:
    steps_by_rank = {0: steps()} if steps_by_rank is None else steps_by_rank
    configs = {0: config()} if configs is None else configs
    windows = {0: window()} if windows is None else windows
    base = dict(command=("python", "train.py"), started_at=1000.0, ended_at=1010.0, exit_code=0,
                status="completed", world_size=len(configs) or 1, steps_requested=60)
    base.update(manifest)
    return RunData(path=Path("/nonexistent/run"), manifest=RunManifest(**base), configs=configs,
                   steps=steps_by_rank, windows=windows,
                   gpu=gpu_samples() if gpu is None else gpu)


class Build:
    """Namespace handed to tests by the ``build`` fixture."""

    loader = staticmethod(loader)
    config = staticmethod(config)
    mem = staticmethod(mem)
    steps = staticmethod(steps)
    window = staticmethod(window)
    gpu_samples = staticmethod(gpu_samples)
    run = staticmethod(run)
    DdpConfig = DdpConfig
    GIB = GIB
    MIB = MIB


@pytest.fixture
def build() -> type[Build]:
    return Build
