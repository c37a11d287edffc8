"""``--against`` marks what each difference can change: numerics, speed, both, or neither."""

from __future__ import annotations

import dataclasses

from gpudoctor.analysis.env_diff import NUMERICS, NUMERICS_SPEED, SPEED, diff, freeze

R = dataclasses.replace


def test_torch_cuda_cudnn_nccl_and_driver_differences_are_marked(facts_factory):
    here = facts_factory.healthy(1)
    there = R(here, torch=R(here.torch, version="2.9.1+cu128", cuda="12.8", cudnn_version=91002,
                            nccl_version="2.26.2"),
              driver=R(here.driver, version="570.1.1"),
              host=R(here.host, packages={**here.host.packages, "numpy": "1.26.4", "rich": "13.0.0",
                                          "nvidia-cublas-cu12": "12.8.1"},
                     env={"NCCL_IB_DISABLE": "1", "CUBLAS_WORKSPACE_CONFIG": ":4096:8"}))
    marks = {d.field: d.changes for d in diff(freeze(here), freeze(there))}
    for field in ("torch", "torch variant", "cuDNN", "NCCL", "package nvidia-cublas-cu12"):
        assert marks[field] == NUMERICS_SPEED, field
    assert marks["driver"] == SPEED
    assert marks["package numpy"] == NUMERICS
    assert marks["env NCCL_IB_DISABLE"] == SPEED
    assert marks["env CUBLAS_WORKSPACE_CONFIG"] == NUMERICS
    assert marks["package rich"] == ""  # a terminal library changes neither
