"""The engine under torchrun with 2 gloo processes on the CPU: DDP, multi-node rendezvous, restarts."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import torch

pytestmark = pytest.mark.distributed

WORKER = Path(__file__).with_name("train_worker.py")
SRC = Path(__file__).resolve().parents[2] / "src"


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR",
                                                            "MASTER_PORT")}
    env["PYTHONPATH"] = str(SRC) + os.pathsep + env.get("PYTHONPATH", "")
    env["OMP_NUM_THREADS"] = "1"
    env["CUDA_VISIBLE_DEVICES"] = ""  # gloo on the CPU even where a GPU exists
    return env


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _torchrun(*args: str) -> list[str]:
    return [sys.executable, "-m", "torch.distributed.run", *args]


def _run(args: list[str], *, check: bool = True, timeout: float = 120) -> int:
    """Run a torchrun command in its own process group, so a timeout also ends its workers."""
    proc = subprocess.Popen(args, env=_env(), start_new_session=True, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT)
    try:
        output, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        raise
    if check and proc.returncode != 0:
        raise AssertionError(f"{' '.join(args)} failed ({proc.returncode}):\n{output.decode()[-3000:]}")
    return proc.returncode


def _load(out: Path, rank: int, attempt: int = 0) -> dict:
    return torch.load(out / f"rank{rank}-attempt{attempt}.pt", weights_only=True)


@pytest.fixture(scope="module")
def ddp_run(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("ddp")
    _run(_torchrun("--standalone", "--nproc_per_node", "2", str(WORKER), str(out)))
    return out


def test_ddp_keeps_parameters_equal_across_ranks(ddp_run):
    r0, r1 = _load(ddp_run, 0), _load(ddp_run, 1)
    assert torch.equal(r0["params"], r1["params"])
    assert r0["world"] == 2 and r0["global_batch"] == 4 * 2 * 2 and r0["steps"] == 12
    assert r0["group_left"] and r1["group_left"]  # Trainer.close() ended the group the trainer joined
    assert r0["losses"] != r1["losses"]  # each rank saw its own shard of the data


def test_fsdp2_trains_like_ddp_and_resumes(tmp_path, ddp_run):
    """FSDP2 (fully_shard) on gloo: the same maths as DDP, sharded; a crashed job resumes from the
    full checkpoint rank 0 wrote."""
    args = _torchrun("--standalone", "--nproc_per_node", "2", str(WORKER), str(tmp_path), "--strategy", "fsdp",
                     "--ckpt-every", "2", "--crash-at", "6")
    assert _run(args, check=False) != 0
    _run(args)
    final = _load(tmp_path, 0)
    assert final["resumed_from"] == 6 and final["steps"] == 12 and _load(tmp_path, 1)["params"] is None
    torch.testing.assert_close(final["params"], _load(ddp_run, 0)["params"], rtol=1e-5, atol=1e-6)


def _two_agents(tmp_path, attempt: int) -> tuple[list[int], str]:
    """Start two torchrun agents that meet through a c10d rendezvous on 127.0.0.1."""
    port = _free_port()
    common = ["--nnodes", "2", "--nproc_per_node", "1", "--rdzv_backend", "c10d",
              "--rdzv_endpoint", f"127.0.0.1:{port}", "--rdzv_id", f"gpudoctor-test-{attempt}"]
    # Both agents run on 127.0.0.1, so both would think they host the c10d store and race to
    # bind its port; say which one hosts, as a real multi-node launch does by its endpoint.
    logs = [tmp_path / f"agent{i}-attempt{attempt}.log" for i in range(2)]
    agents = [subprocess.Popen(_torchrun(*common, "--rdzv_conf", f"is_host={int(i == 0)}", str(WORKER),
                                         str(tmp_path)),
                               env=_env(), start_new_session=True, stdout=log.open("wb"),
                               stderr=subprocess.STDOUT) for i, log in enumerate(logs)]
    try:
        codes = [a.wait(timeout=120) for a in agents]
    finally:
        for a in agents:
            if a.poll() is None:
                os.killpg(a.pid, signal.SIGKILL)
    return codes, "\n".join(log.read_text(errors="replace")[-3000:] for log in logs)


def test_two_torchrun_agents_with_c10d_rendezvous(tmp_path, ddp_run):
    # The port is free when chosen but can be taken before the store binds it (other jobs share
    # this machine): a launch that fails to start gets one more try on a fresh port. What the
    # job computed is checked in full either way.
    codes, logs = _two_agents(tmp_path, 0)
    if codes != [0, 0]:
        codes, retry_logs = _two_agents(tmp_path, 1)
        logs += "\n--- retry ---\n" + retry_logs
    assert codes == [0, 0], logs
    r0, r1 = _load(tmp_path, 0), _load(tmp_path, 1)
    assert torch.equal(r0["params"], r1["params"]) and r0["world"] == 2
    # the same job as on one node: two 1-process "nodes" train exactly like 2 local processes
    assert torch.equal(r0["params"], _load(ddp_run, 0)["params"])


def test_a_restarted_job_resumes_from_the_last_checkpoint(tmp_path, ddp_run):
    """What ``torchrun --max-restarts`` does after a worker dies: start the same command again.
    The engine must find the newest checkpoint by itself and continue bit for bit."""
    args = _torchrun("--standalone", "--nproc_per_node", "2", str(WORKER), str(tmp_path),
                     "--ckpt-every", "2", "--crash-at", "4")
    assert _run(args, check=False) != 0 and (tmp_path / "crashed-rank0").exists()
    _run(args)
    final0, final1 = _load(tmp_path, 0), _load(tmp_path, 1)
    assert final0["resumed_from"] == 4 and final0["steps"] == 12
    reference = _load(ddp_run, 0)
    assert final0["losses"] == reference["losses"][4:]  # bit for bit after the restart
    assert torch.equal(final0["params"], reference["params"]) and torch.equal(final1["params"], final0["params"])
