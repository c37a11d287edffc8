"""``gpudoctor run -- torchrun --standalone --nproc_per_node 2 x.py``: 2 gloo ranks on the CPU;
and ``torchrun --nnodes 2`` as two agents on this machine, ``gpudoctor run`` on each."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import run_scripts

from gpudoctor.records.rundir import load_run

SRC = Path(__file__).resolve().parents[2] / "src"


@pytest.mark.distributed
def test_two_ranks_record_and_stop_at_the_same_step(tmp_path: Path) -> None:
    torchrun = shutil.which("torchrun") or str(Path(sys.executable).with_name("torchrun"))
    (tmp_path / "ddp.py").write_text(run_scripts.DDP, encoding="utf-8")
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(SRC), env.get("PYTHONPATH", "")) if p)
    env["OMP_NUM_THREADS"] = "1"
    result = subprocess.run(
        [sys.executable, "-m", "gpudoctor", "run", "--steps", "14", "--json", "--fail-on", "never", "--out", "rd", "--",
         torchrun, "--standalone", "--nproc_per_node", "2", "ddp.py"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=240,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    payload = json.loads(result.stdout)
    assert payload["manifest"]["status"] == "stopped"
    # 14 steps on 2 busy CPU cores: rank step times differ by scheduling noise, not a straggler
    assert "GD-RUN-STRAGGLER" not in json.dumps(payload)
    run = load_run(tmp_path / "rd")
    assert run.manifest.ranks == (0, 1) and run.manifest.world_size == 2
    assert run.manifest.steps_recorded == (14, 14)
    for rank in (0, 1):
        assert [s.step for s in run.steps[rank]] == list(range(14))  # same stop step on each rank
        assert all(s.rank == rank and s.samples == 8 for s in run.steps[rank])
        config = run.configs[rank]
        assert (config.rank, config.world_size, config.backend) == (rank, 2, "gloo")
        assert config.ddp is not None and config.ddp.kind == "ddp" and config.ddp.bucket_cap_mb == 25.0
        (loader,) = config.loaders
        assert loader.sampler == "DistributedSampler" and loader.set_epoch_called is True
        assert rank in run.windows


def _two_agent_runs(tmp_path: Path, torchrun: str, env: dict, attempt: int) -> list[subprocess.CompletedProcess]:
    """``gpudoctor run`` on each of two torchrun agents (c10d on 127.0.0.1), as on two nodes."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    procs = []
    for node in (0, 1):
        cmd = [sys.executable, "-m", "gpudoctor", "run", "--steps", "14", "--json", "--fail-on", "never",
               "--out", f"node{node}-{attempt}", "--", torchrun, "--nnodes", "2", "--nproc-per-node", "1",
               "--rdzv-backend", "c10d", "--rdzv-endpoint", f"127.0.0.1:{port}", "--rdzv-id",
               f"gpudoctor-run-{attempt}", "--rdzv-conf", f"is_host={int(node == 0)}", "ddp.py"]
        procs.append(subprocess.Popen(cmd, cwd=tmp_path, env=env, stdout=subprocess.PIPE,
                                      stderr=subprocess.PIPE, text=True, start_new_session=True))
    done = []
    try:
        for proc in procs:
            out, err = proc.communicate(timeout=150)
            done.append(subprocess.CompletedProcess(proc.args, proc.returncode, out, err))
    finally:
        for proc in procs:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
    return done


@pytest.mark.distributed
def test_two_agents_record_their_ranks_and_diagnose_merges_the_nodes(tmp_path: Path) -> None:
    """``torchrun --nnodes 2`` with ``gpudoctor run`` on each node: each run directory holds its
    node's rank under its global number and the job's world size; ``diagnose DIR DIR`` is one run."""
    torchrun = shutil.which("torchrun") or str(Path(sys.executable).with_name("torchrun"))
    (tmp_path / "ddp.py").write_text(run_scripts.DDP, encoding="utf-8")
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(SRC), env.get("PYTHONPATH", "")) if p)
    env.update(OMP_NUM_THREADS="1", CUDA_VISIBLE_DEVICES="")
    attempt = 0
    results = _two_agent_runs(tmp_path, torchrun, env, attempt)
    if any(r.returncode != 0 for r in results):  # the free port taken before the store bound it
        attempt = 1
        results = _two_agent_runs(tmp_path, torchrun, env, attempt)
    assert [r.returncode for r in results] == [0, 0], "\n".join(r.stderr[-2000:] for r in results)
    runs = [load_run(tmp_path / f"node{node}-{attempt}") for node in (0, 1)]
    assert sorted(r for run in runs for r in run.manifest.ranks) == [0, 1]
    for run in runs:
        (rank,) = run.manifest.ranks
        assert run.manifest.world_size == 2 and run.manifest.steps_recorded == (14,)
        assert run.configs[rank].world_size == 2 and [s.step for s in run.steps[rank]] == list(range(14))
    merged = subprocess.run([sys.executable, "-m", "gpudoctor", "diagnose", f"node0-{attempt}",
                             f"node1-{attempt}", "--json", "--fail-on", "never"],
                            cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert merged.returncode == 0, merged.stderr
    payload = json.loads(merged.stdout)
    assert payload["manifest"]["ranks"] == [0, 1] and payload["manifest"]["world_size"] == 2
    assert [b["rank"] for b in payload["breakdown"]] == [0, 1]
    assert payload["manifest"]["notes"][0].startswith("merged from 2 run directories")
