"""``gpudoctor check --cluster`` on GPUs: NCCL all-reduces, NVML clocks.

One node of two ranks (``torchrun --standalone --nproc-per-node 2``): the within-node all-reduce
runs over NCCL on the GPUs, each rank reads its GPUs' clocks. Two agents of one rank each, each
agent given its own GPU: the all-reduce "between nodes" runs over NCCL too (on one host NCCL
takes P2P/NVLink, so its figure is the intra-node link's, not a network's).
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available() or torch.cuda.device_count() < 2,
                       reason="needs 2 CUDA GPUs"),
]
SRC = Path(__file__).resolve().parents[2] / "src"


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(SRC), env.get("PYTHONPATH", "")) if p)
    env.update(extra)
    return env


def _figures(payload: dict) -> dict[str, dict]:
    return {f["scope"]: f for f in payload["report"]["collectives"]}


def test_one_node_of_two_gpus_measures_nccl_within_the_node(tmp_path: Path) -> None:
    proc = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
                           "-m", "gpudoctor", "check", "--cluster", "--json", "--fail-on", "never"],
                          cwd=tmp_path, env=_env(), capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    payload = json.loads(proc.stdout)
    within = _figures(payload)["within node 0"]
    assert within["backend"] == "nccl" and within["device"] == "cuda" and within["busbw_gbs"] > 1.0
    print(f"NCCL all-reduce within the node: {within['busbw_gbs']:.1f} GB/s at "
          f"{within['size_bytes'] >> 20} MiB")
    assert all(r["clocks"] and r["clocks"][0]["sm_max_mhz"] for r in payload["ranks"])
    assert payload["report"]["differences"] == []  # two ranks of one node: the same environment


def test_two_agents_one_gpu_each_measure_nccl_between_them(tmp_path: Path) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    logs = [tmp_path / f"agent{i}.log" for i in range(2)]
    agents = []
    for i, log in enumerate(logs):
        cmd = [sys.executable, "-m", "torch.distributed.run", "--nnodes", "2", "--nproc-per-node", "1",
               "--rdzv-backend", "c10d", "--rdzv-endpoint", f"127.0.0.1:{port}", "--rdzv-id", "gpu-cluster",
               "--rdzv-conf", f"is_host={int(i == 0)}", "-m", "gpudoctor", "check", "--cluster", "--json",
               "--fail-on", "never"]
        agents.append(subprocess.Popen(cmd, cwd=tmp_path, env=_env(CUDA_VISIBLE_DEVICES=str(i)),
                                       stdout=log.open("wb"), stderr=subprocess.STDOUT, start_new_session=True))
    try:
        codes = [a.wait(timeout=300) for a in agents]
    finally:
        for a in agents:
            if a.poll() is None:
                os.killpg(a.pid, signal.SIGKILL)
    texts = [log.read_text(errors="replace") for log in logs]
    assert codes == [0, 0], "\n---\n".join(t[-3000:] for t in texts)
    (text,) = [t for t in texts if '"kind": "gpudoctor.cluster-check"' in t]
    payload = json.loads(text[text.index("{"):text.rindex("}") + 1])
    between = _figures(payload)["between nodes"]
    assert between["backend"] == "nccl" and between["busbw_gbs"] > 1.0
    print(f"NCCL all-reduce between two 1-GPU agents: {between['busbw_gbs']:.1f} GB/s")
