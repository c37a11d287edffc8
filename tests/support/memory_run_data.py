"""Hand-built records of a ``gpudoctor memory run`` directory (MiB figures chosen by hand)."""

from __future__ import annotations

from pathlib import Path

from gpudoctor.records.memory import AllocatorStats, LiveBlock, OomSnapshot, StageMemory

__all__ = ["StageMemory"]
from gpudoctor.records.run import RankConfig, RunManifest
from gpudoctor.records.rundir import RunData
from gpudoctor.records.step import StepRecord
from gpudoctor.records.units import MIB

# (stage, step, allocated, reserved, peak since the previous stage) in MiB
STAGES = [
    ("model", 0, 100, 120, 100),
    ("batch", 0, 110, 120, 110),
    ("forward", 0, 510, 600, 530),
    ("backward", 0, 210, 700, 650),
    ("optimizer", 0, 410, 700, 420),
    ("batch", 1, 310, 700, 410),
    ("forward", 1, 710, 800, 730),
    ("backward", 1, 410, 800, 850),
    ("optimizer", 1, 412, 800, 420),
]


def stages() -> list[StageMemory]:
    return [StageMemory(stage=s, step=n, allocated_bytes=a * MIB, reserved_bytes=r * MIB,
                        peak_allocated_bytes=p * MIB) for s, n, a, r, p in STAGES]


def steps(n: int = 20, *, grow_mib: int = 0, retries: int = 0, split_mib: int = 5) -> list[StepRecord]:
    return [
        StepRecord(rank=0, step=i, t_end_s=1000.0 + i * 0.1, step_ms=100.0, gpu_ms=60.0, samples=8,
                   mem=AllocatorStats(allocated_bytes=(410 + grow_mib * i) * MIB,
                                      reserved_bytes=(800 + grow_mib * i) * MIB,
                                      peak_allocated_bytes=(850 + grow_mib * i) * MIB,
                                      peak_reserved_bytes=(800 + grow_mib * i) * MIB,
                                      inactive_split_bytes=split_mib * MIB, alloc_retries=retries * i))
        for i in range(n)
    ]


def config(total_mib: int = 1000, alloc_conf: str = "") -> RankConfig:
    return RankConfig(rank=0, local_rank=0, world_size=1, pid=1, device="cuda:0",
                      cuda_device_index=0, gpu_total_memory_bytes=total_mib * MIB, alloc_conf=alloc_conf)


def oom() -> OomSnapshot:
    return OomSnapshot(
        device=0, requested_bytes=300 * MIB, allocated_bytes=700 * MIB, reserved_bytes=720 * MIB,
        device_free_bytes=40 * MIB, device_total_bytes=1000 * MIB,
        blocks=(LiveBlock(size_bytes=400 * MIB, frames=("train.py:12 forward",)),
                LiveBlock(size_bytes=200 * MIB, frames=("train.py:30 <module>",)),
                LiveBlock(size_bytes=100 * MIB, frames=("train.py:12 forward",))),
        pickle_path="rd/oom-snapshot.pickle",
    )


def run_data(**kwargs) -> RunData:
    base = {"path": Path("rd"), "manifest": RunManifest(command=("python", "train.py"), started_at=0.0),
            "configs": {0: config()}, "steps": {0: steps()}, "memory": {0: stages()}}
    base.update(kwargs)
    return RunData(**base)
