"""Golden files of the rendered check: inject facts → rules → render → compare."""

from __future__ import annotations

import dataclasses
import io

from rich.console import Console

from gpudoctor.analysis.env_diff import diff, freeze
from gpudoctor.analysis.env_rules import check_env
from gpudoctor.records.env import DeviceNode, ProbeRun
from gpudoctor.report.check_view import render_check

R = dataclasses.replace


def _render(facts, **kwargs) -> str:
    console = Console(file=io.StringIO(), width=100, color_system=None)
    render_check(console, check_env(facts), **kwargs)
    return console.file.getvalue()


def test_golden_two_h200(golden, facts_factory):
    golden("console/check_2xh200.txt", _render(facts_factory.healthy(2)))


def test_golden_cpu_machine(golden, facts_factory):
    golden("console/check_cpu_only.txt", _render(facts_factory.cpu_only()))


def test_golden_broken_machine(golden, facts_factory):
    """Old driver, locked device files, a hung GPU 1, tiny /dev/shm: several layers at once."""
    f = facts_factory.healthy(2)
    nodes = tuple(DeviceNode(path=n.path, exists=True, readable=True, writable=False,
                             mode="crw-r--r--") for n in f.host.device_nodes)
    f = R(f, driver=R(f.driver, version="575.57.08", cuda_version="12.9"),
          host=R(f.host, device_nodes=nodes, shm_total_bytes=64 * 1024**2,
                 env={"CUDA_VISIBLE_DEVICES": "0,1"}),
          devices=f.devices[:1], p2p=None, nccl=None,
          probe=ProbeRun(status="timeout", timeout_s=60.0,
                         stage="context, allocation and compute on GPU 1"))
    golden("console/check_broken.txt", _render(f))


def test_golden_against_and_freeze(golden, facts_factory):
    here = facts_factory.healthy(1)
    there_facts = R(here, torch=R(here.torch, version="2.9.1+cu128", cuda="12.8",
                                  cudnn_version=91002, nccl_version="2.27.3"),
                    host=R(here.host, packages={"numpy": "1.26.4", "torch": "2.9.1+cu128"},
                           env={"NVIDIA_TF32_OVERRIDE": "0"}))
    differences = diff(freeze(here), freeze(there_facts))
    text = _render(here, differences=differences, against="env-frozen.json",
                   frozen_to="env-now.json")
    golden("console/check_against.txt", text)
