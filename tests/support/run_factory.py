"""A synthetic run directory with every file the report reads, built from records.

Import it in tests as ``from run_factory import make_run`` (``tests/support`` is on sys.path).
"""

from __future__ import annotations

import math
from pathlib import Path

from gpudoctor.records import base
from gpudoctor.records.env import CheckReport, CheckResult, Layer, Verdict
from gpudoctor.records.finding import Finding, Severity
from gpudoctor.records.gpu import GpuSample
from gpudoctor.records.memory import AllocatorStats
from gpudoctor.records.run import LoaderConfig, RankConfig, RunManifest
from gpudoctor.records import rundir
from gpudoctor.records.step import StepRecord

PLANTED = "</script><script>window.__pwned = 1</script><b>x</b>"


def make_run(path: Path, *, seconds: float = 30.0, hz: float = 10.0, ranks: int = 1,
             steps: int = 60, planted: str = "") -> Path:
    """Write a run directory: ``seconds`` of GPU samples at ``hz``, ``steps`` steps per rank."""
    path.mkdir(parents=True, exist_ok=True)
    t0 = 1_780_000_000.0
    manifest = RunManifest(
        command=("python", f"train{planted}.py", "--lr", "0.1"),
        started_at=t0, ended_at=t0 + seconds, exit_code=0, status="stopped",
        world_size=ranks, steps_requested=steps, hostname="gpu-node", gpudoctor_version="0.1.0",
        ranks=tuple(range(ranks)),
    )
    base.write_json(path / rundir.MANIFEST, manifest, kind=rundir.KIND_MANIFEST)
    with base.JsonlWriter(path / rundir.GPU_SAMPLES, kind=rundir.KIND_GPU) as w:
        for i in range(int(seconds * hz)):
            for gpu in range(ranks):
                w.write(GpuSample(
                    timestamp_s=t0 + i / hz, index=gpu, name=f"NVIDIA H200{planted}",
                    util_gpu_pct=35.0 + 30.0 * math.sin(i / 7.0) ** 2,
                    mem_total_bytes=143_771 << 20, mem_used_bytes=(20_000 + 3 * i) << 20,
                    power_w=300.0 + i % 50, power_limit_w=700.0,
                ))
    for rank in range(ranks):
        loader = LoaderConfig(num_workers=0, pin_memory=False, persistent_workers=False,
                              prefetch_factor=None, batch_size=128, drop_last=False,
                              sampler="RandomSampler", dataset=f"CIFARish{planted}")
        config = RankConfig(rank=rank, local_rank=rank, world_size=ranks, pid=1000 + rank,
                            device=f"cuda:{rank}", device_name=f"NVIDIA H200{planted}",
                            torch_version="2.11.0+cu130", param_count=11_200_000,
                            param_dtypes=("float32",), optimizer="SGD", loaders=(loader,))
        base.write_json(path / rundir.config_file(rank), config, kind=rundir.KIND_CONFIG)
        with base.JsonlWriter(path / rundir.steps_file(rank), kind=rundir.KIND_STEPS) as w:
            for s in range(steps):
                w.write(StepRecord(
                    rank=rank, step=s, t_end_s=t0 + 1 + s * 0.4, step_ms=40.0 + (s % 3),
                    data_wait_ms=16.0, h2d_ms=1.5, gpu_ms=18.0, samples=128,
                    mem=AllocatorStats(
                        allocated_bytes=(900 + 2 * s) << 20, reserved_bytes=(1400 + 2 * s) << 20,
                        peak_allocated_bytes=(1200 + 2 * s) << 20, peak_reserved_bytes=1500 << 20,
                    ),
                ))
    env = CheckReport(results=(
        CheckResult(layer=Layer.DRIVER, name="driver.version", verdict=Verdict.PASS,
                    evidence="driver 580.159.04 supports CUDA 13.0"),
        CheckResult(layer=Layer.HOST, name="host.shm", verdict=Verdict.WARN,
                    evidence=f"/dev/shm is 64 MiB{planted}", fix="docker run --shm-size=8g"),
    ), summary="1 warning")
    base.write_json(path / rundir.ENV, env, kind=rundir.KIND_ENV)
    return path


def make_findings(planted: str = "") -> list[Finding]:
    return [
        Finding(code="GD-RUN-DATALOADER", severity=Severity.ERROR,
                title=f"Data-loader bound: 40% of each step waits for data{planted}",
                evidence=("data wait 16.0 ms of 40.0 ms per step (median of 57 steps)",
                          "DataLoader num_workers=0, pin_memory=False"),
                fix="DataLoader(dataset, batch_size=128, num_workers=8, pin_memory=True,\n"
                    "           persistent_workers=True, prefetch_factor=4)",
                expected_gain=0.38),
        Finding(code="GD-RUN-LEAK", severity=Severity.WARN,
                title="Allocated memory grows by 2.0 MiB every step",
                evidence=("slope 2.0 MiB/step over 57 steps",), fix="total_loss += loss.item()",
                expected_gain=None),
    ]

