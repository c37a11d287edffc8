"""Gradients reduced twice on a DDP model, and input copies near the measured PCIe ceiling, on
hand-built runs; the ceiling read from a saved ``gpudoctor bench copy --json``."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gpudoctor.analysis.diagnose import diagnose
from gpudoctor.records.finding import Severity
from gpudoctor.records.rundir import copy_ceiling

TWICE = "GD-RUN-GRAD-REDUCED-TWICE"
PCIE = "GD-RUN-PCIE-DEMAND"


def by_code(findings):
    return {f.code: f for f in findings}


def ddp_run(build, **ddp):
    n = 2
    return build.run(
        steps_by_rank={r: build.steps(rank=r) for r in range(n)},
        configs={r: build.config(r, world_size=n, loaders=(build.loader(sampler="DistributedSampler",
                                                                        set_epoch_called=True),),
                                 ddp=build.DdpConfig(kind="ddp", **ddp)) for r in range(n)},
        windows={r: build.window(r) for r in range(n)},
        gpu=sum((build.gpu_samples(index=r, pids=(1000 + r,)) for r in range(n)), []), world_size=n)


def test_manual_allreduce_of_ddp_gradients_is_named(build) -> None:
    run = ddp_run(build, manual_grad_allreduces=40, manual_grad_allreduce_bytes=40 * build.MIB,
                  manual_grad_allreduce_first_step=0)
    f = by_code(diagnose(run))[TWICE]
    assert f.severity is Severity.WARN and f.expected_gain is None
    assert f.evidence[0] == ("rank 0: 40 dist.all_reduce call(s) on the DDP model's own parameter gradients "
                             "after backward(), 40.0 MiB in all, from step 0")
    assert "delete the manual loop" in f.fix
    assert TWICE not in by_code(diagnose(ddp_run(build)))


def test_pcie_demand_against_the_measured_ceiling(build) -> None:
    # 40 ms steps copying 1.5 GB: at 50 GB/s the copies take 30 ms, 75% of the step
    run = build.run(steps_by_rank={0: build.steps(h2d_bytes=1_500_000_000)})
    assert PCIE not in by_code(diagnose(run))  # no ceiling recorded: no verdict
    run.copy_ceiling_gbs = 50.0
    f = by_code(diagnose(run))[PCIE]
    assert f.severity is Severity.WARN and f.title.startswith("Input copies need 75% of each step")
    assert "37.5 GB/s of demand" in f.evidence[0] and "the copies take 30.0 ms, 75% of the step" in f.evidence[1]
    assert "uint8_collate" in f.fix
    run.copy_ceiling_gbs = 40.0  # 37.5 ms of 40: the link is the step
    assert by_code(diagnose(run))[PCIE].severity is Severity.ERROR
    run.copy_ceiling_gbs = 200.0  # 7.5 ms: slack
    assert PCIE not in by_code(diagnose(run))


def test_copy_ceiling_reads_the_largest_pinned_h2d_buffer(tmp_path: Path) -> None:
    rows = [{"section": "copy", "op": "h2d_pinned", "unit": "GB/s", "median": 41.0, "size_bytes": 1 << 20},
            {"section": "copy", "op": "h2d_pinned", "unit": "GB/s", "median": 55.5, "size_bytes": 1 << 28},
            {"section": "copy", "op": "h2d_pageable", "unit": "GB/s", "median": 21.4, "size_bytes": 1 << 28}]
    path = tmp_path / "bench.json"
    path.write_text(json.dumps({"device_name": "NVIDIA H200", "results": rows}), encoding="utf-8")
    assert copy_ceiling(path) == 55.5
    path.write_text(json.dumps({"results": []}), encoding="utf-8")
    assert copy_ceiling(path) is None
    path.write_text("not json", encoding="utf-8")
    from gpudoctor.records.base import SchemaError

    with pytest.raises(SchemaError, match="bench copy --json"):
        copy_ceiling(path)
