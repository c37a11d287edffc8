"""--freeze / --against logic: what is frozen, which differences are reported and how."""

from __future__ import annotations

import dataclasses
import json

from gpudoctor.analysis.env_diff import KIND, diff, freeze
from gpudoctor.records.base import read_json, write_json
from gpudoctor.records.env import FrozenEnv, Verdict

R = dataclasses.replace


def test_freeze_names_the_variant_by_tag_and_keeps_versions(facts_factory, tmp_path):
    f = facts_factory.healthy(2)
    f = R(f, host=R(f.host, env={"NCCL_IB_DISABLE": "1", "CUDA_VISIBLE_DEVICES": "0,1",
                                 "MASTER_PORT": "29500"}))
    frozen = freeze(f)
    assert frozen.torch_variant == "cu130" and frozen.torch_cuda == "13.0"
    assert frozen.driver_version == "580.95.05" and frozen.nccl_version == "2.27.7"
    assert frozen.gpu_names == ("NVIDIA H200", "NVIDIA H200")
    assert frozen.env == {"NCCL_IB_DISABLE": "1"}  # per-machine variables are not frozen
    assert frozen.packages["numpy"] == "2.2.1"
    path = tmp_path / "env.json"
    write_json(path, frozen, kind=KIND)
    assert read_json(path, FrozenEnv, kind=KIND) == frozen
    assert "://" not in path.read_text()  # no index or registry address is written
    assert json.loads(path.read_text())["kind"] == KIND


def test_same_environment_has_no_differences(facts_factory):
    f = facts_factory.healthy(1)
    assert diff(freeze(f), freeze(f)) == []


def test_differences_say_why(facts_factory):
    here = facts_factory.healthy(1)
    there = R(here, torch=R(here.torch, version="2.9.1+cu128", cuda="12.8", cudnn_version=91002),
              host=R(here.host, packages={"numpy": "1.26.4", "torch": "2.9.1+cu128",
                                          "triton": "3.5.0", "flash-attn": "2.7.4"},
                     env={"CUBLAS_WORKSPACE_CONFIG": ":4096:8"}))
    found = {d.field: d for d in diff(freeze(here), freeze(there))}
    assert set(found) == {"torch variant", "torch", "cuDNN", "package numpy",
                          "package flash-attn", "env CUBLAS_WORKSPACE_CONFIG"}
    assert found["cuDNN"].here == "9.13.0" and found["cuDNN"].there == "9.10.2"
    assert found["package flash-attn"].here == "not installed"
    assert "deterministic" in found["env CUBLAS_WORKSPACE_CONFIG"].why
    assert all(d.verdict is Verdict.WARN and d.why for d in found.values())


def test_cpu_variant_here_and_too_old_driver_fail(facts_factory):
    gpu = facts_factory.healthy(1)
    cpu = R(gpu, torch=R(gpu.torch, version="2.11.0+cpu", cuda=None))
    found = {d.field: d for d in diff(freeze(cpu), freeze(gpu))}
    assert found["torch variant"].verdict is Verdict.FAIL
    old = R(gpu, driver=R(gpu.driver, version="535.1", cuda_version="12.2"))
    found = {d.field: d for d in diff(freeze(old), freeze(gpu))}
    assert found["driver CUDA"].verdict is Verdict.FAIL
