"""The probes on this machine: the subprocess runner (hang, crash, partial output), the
nvidia-smi parsers, and host facts. Real processes, no mocks."""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

from gpudoctor.collectors.env import gather_facts
from gpudoctor.collectors.env.driver import (
    count_pci_nvidia_gpus,
    parse_smi_cuda_version,
    parse_smi_query,
)
from gpudoctor.collectors.env.host import device_nodes, relevant_env
from gpudoctor.collectors.env.runner import ProbeProcess
from gpudoctor.records.base import to_dict
from gpudoctor.records.env import TorchFacts

TORCH_LINE = json.dumps({"kind": "torch", "facts": to_dict(TorchFacts(
    version="2.11.0+cu130", cuda="13.0", cuda_available=True, device_count=2))})


def _script(body: str) -> list[str]:
    return [sys.executable, "-c", body]


def test_hanging_probe_is_killed_and_what_it_said_is_kept():
    body = (f"import sys, time; print({TORCH_LINE!r}, flush=True); "
            "print('{\"kind\": \"begin\", \"stage\": \"context, allocation and compute on GPU 0\"}',"
            " flush=True); time.sleep(60)")
    start = time.perf_counter()
    parts = ProbeProcess(1.5, _script(body)).finish()
    assert time.perf_counter() - start < 10
    probe = parts["probe"]
    assert probe.status == "timeout" and probe.stage.endswith("on GPU 0")
    assert parts["torch"].device_count == 2  # facts printed before the hang survive


def test_hang_kills_the_whole_process_group(tmp_path: Path):
    pid_file = tmp_path / "grandchild.pid"
    body = ("import subprocess, sys, time; "
            "p = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)']); "
            f"open({str(pid_file)!r}, 'w').write(str(p.pid)); time.sleep(60)")
    ProbeProcess(2.0, _script(body)).finish()
    pid = int(pid_file.read_text())
    deadline = time.time() + 5
    while time.time() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return
        try:  # reap it if it became our zombie (it is not our child: init reaps it)
            os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:
            pass
        time.sleep(0.05)
    raise AssertionError("the probe's child survived the timeout")


def test_crashing_probe_reports_stage_and_stderr():
    body = ("import sys; print('{\"kind\": \"begin\", \"stage\": \"CPU reference matmul\"}', "
            "flush=True); print('Segmentation fault in libcublas', file=sys.stderr); sys.exit(139)")
    probe = ProbeProcess(10, _script(body)).finish()["probe"]
    assert probe.status == "crashed" and probe.returncode == 139
    assert probe.stage == "CPU reference matmul" and "libcublas" in probe.stderr_tail


def test_noise_on_stdout_is_ignored():
    body = f"print('hello from sitecustomize'); print({TORCH_LINE!r}); print('{{\"kind\": \"done\"}}')"
    parts = ProbeProcess(10, _script(body)).finish()
    assert parts["probe"].status == "ok" and parts["torch"].version == "2.11.0+cu130"


def test_gather_facts_with_a_hanging_probe_returns_facts():
    facts = gather_facts(timeout_s=1.0, probe_argv=_script("import time; time.sleep(30)"))
    assert facts.probe.status == "timeout" and facts.probe.stage == ""
    assert facts.host.python_version  # the host part was gathered meanwhile


SMI_QUERY = """0, NVIDIA H200, GPU-1c5e, 143771, 0, 580.95.05
1, NVIDIA H200, GPU-9a2b, 143771, 512, 580.95.05
"""
SMI_BANNER = """+-----------------------------------------------------------------------------------------+
| NVIDIA-SMI 580.95.05              Driver Version: 580.95.05      CUDA Version: 13.0     |
"""


def test_nvidia_smi_parsers():
    gpus, version = parse_smi_query(SMI_QUERY)
    assert version == "580.95.05" and [g.name for g in gpus] == ["NVIDIA H200"] * 2
    assert gpus[1].memory_used_bytes == 512 * 1024**2 and gpus[0].uuid == "GPU-1c5e"
    assert parse_smi_cuda_version(SMI_BANNER) == "13.0"
    assert parse_smi_cuda_version("NVIDIA-SMI has failed because it couldn't communicate") is None
    assert parse_smi_query("1, T4, GPU-x, [N/A], [N/A], 470.1")[0][0].memory_total_bytes is None


def test_pci_count_reads_vendor_and_class(tmp_path: Path):
    for name, vendor, klass in [("a", "0x10de", "0x030200"), ("b", "0x10de", "0x040300"),
                                ("c", "0x8086", "0x030000")]:
        (tmp_path / name).mkdir()
        (tmp_path / name / "vendor").write_text(vendor + "\n")
        (tmp_path / name / "class").write_text(klass + "\n")
    assert count_pci_nvidia_gpus(tmp_path) == 1  # the NVIDIA audio function does not count
    assert count_pci_nvidia_gpus(tmp_path / "missing") is None


def test_device_nodes_report_access(tmp_path: Path):
    ok, locked = tmp_path / "nvidia0", tmp_path / "nvidia1"
    ok.write_text(""), locked.write_text("")
    locked.chmod(0)
    nodes = {n.path: n for n in device_nodes(str(tmp_path / "nvidia*"))}
    assert nodes[str(ok)].readable and nodes[str(ok)].writable
    if os.geteuid() != 0:  # root may read anything
        assert not nodes[str(locked)].readable
    assert nodes[str(locked)].mode == "----------"


def test_relevant_env_keeps_gpu_variables_only():
    env = relevant_env({"CUDA_VISIBLE_DEVICES": "1", "NCCL_IB_DISABLE": "1", "HOME": "/root",
                        "TORCH_NCCL_BLOCKING_WAIT": "1"})
    assert env == {"CUDA_VISIBLE_DEVICES": "1", "NCCL_IB_DISABLE": "1",
                   "TORCH_NCCL_BLOCKING_WAIT": "1"}
