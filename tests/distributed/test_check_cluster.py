"""``gpudoctor check --cluster`` under two torchrun agents on this machine (c10d rendezvous on
127.0.0.1, gloo on the CPU), one agent started with NCCL_P2P_DISABLE=1: the comparison rank 0
prints marks that difference, and both agents exit 1 (a difference at --fail-on warn)."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[2] / "src"
pytestmark = pytest.mark.distributed


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")
           and not k.startswith(("NCCL_", "GPUDOCTOR_"))}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(SRC), env.get("PYTHONPATH", "")) if p)
    env.update(OMP_NUM_THREADS="1", CUDA_VISIBLE_DEVICES="", COLUMNS="160", **extra)
    return env


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _two_agents(tmp_path: Path, attempt: int, *, nproc: int = 1,
                planted: dict[str, str]) -> tuple[list[int | None], list[str]]:
    """Two torchrun agents of ``nproc`` ranks each; the second gets the ``planted`` variables."""
    port = _free_port()
    logs = [tmp_path / f"agent{i}-attempt{attempt}.log" for i in range(2)]
    agents = []
    for i, log in enumerate(logs):
        # both agents run on 127.0.0.1: say which hosts the c10d store, as the endpoint would
        cmd = [sys.executable, "-m", "torch.distributed.run", "--nnodes", "2", "--nproc-per-node", str(nproc),
               "--node-rank", str(i), "--rdzv-backend", "c10d", "--rdzv-endpoint", f"127.0.0.1:{port}",
               "--rdzv-id", f"gpudoctor-cluster-{attempt}", "--rdzv-conf", f"is_host={int(i == 0)}",
               "-m", "gpudoctor", "check", "--cluster", "--timeout", "40"]
        env = _env(**planted) if i == 1 else _env()
        agents.append(subprocess.Popen(cmd, env=env, cwd=tmp_path, start_new_session=True,
                                       stdout=log.open("wb"), stderr=subprocess.STDOUT))
    codes: list[int | None] = []
    try:
        for agent in agents:
            try:
                codes.append(agent.wait(timeout=60))
            except subprocess.TimeoutExpired:
                codes.append(None)
    finally:
        for agent in agents:
            if agent.poll() is None:
                os.killpg(agent.pid, signal.SIGKILL)
    return codes, [log.read_text(errors="replace") for log in logs]


def _launch(tmp_path: Path, **kwargs) -> tuple[list[int | None], str, str]:
    codes, logs = _two_agents(tmp_path, 0, **kwargs)
    if not any("gpudoctor check --cluster" in log for log in logs):
        # the port was free when chosen but taken before the store bound it: one more try
        codes, logs = _two_agents(tmp_path, 1, **kwargs)
    everything = "\n---\n".join(log[-4000:] for log in logs)
    tables = [log for log in logs if "gpudoctor check --cluster" in log]
    assert len(tables) == 1, everything  # rank 0's agent alone prints
    return codes, tables[0], everything


def test_two_agents_compare_nodes_and_mark_the_planted_variable(tmp_path: Path) -> None:
    codes, table, everything = _launch(tmp_path, planted={"NCCL_P2P_DISABLE": "1"})
    assert codes == [1, 1], everything  # a difference at --fail-on warn: 1, on every node
    lines = table.splitlines()
    (at,) = [i for i, line in enumerate(lines) if "env NCCL_P2P_DISABLE" in line]
    assert "! env NCCL_P2P_DISABLE" in lines[at] and "changes speed" in lines[at], table
    values = sorted(line.split("│")[2].strip() for line in lines[at:at + 2])  # its "Value on" cells
    assert values in (["node 0: 1", "node 1: unset"], ["node 0: unset", "node 1: 1"]), table
    assert "nodes: node 0 = " in table and "node 1 = " in table
    assert "rendezvous.store        │ PASS" in table and "allreduce.between_nodes │ PASS" in table
    assert "gloo on cpu: bus bandwidth" in table
    assert "1 difference(s) between ranks (1 can change results or speed)" in table.replace("\n", " ")


def test_two_agents_of_two_ranks_flag_a_missing_interface(tmp_path: Path) -> None:
    """Several ranks a node: an all-reduce within each node too; an NCCL_SOCKET_IFNAME naming
    no interface on one node fails its row."""
    codes, table, everything = _launch(tmp_path, nproc=2, planted={"NCCL_SOCKET_IFNAME": "nosuchif9"})
    assert codes == [1, 1], everything
    flat = " ".join(table.split())
    assert "nodes: node 0 = " in flat and "(ranks 0, 1)" in flat and "(ranks 2, 3)" in flat
    assert "! env NCCL_SOCKET_IFNAME" in table
    assert "nccl.socket_ifname │ FAIL │" in flat and "NCCL_SOCKET_IFNAME=nosuchif9 names nosuchif9" in flat
    assert "within node 0 (2 ranks)" in flat and "within node 1 (2 ranks)" in flat
    assert "allreduce.between_nodes │ PASS" in flat
