"""``gpudoctor run`` with 2 gloo ranks on the CPU: torch.multiprocessing.spawn ranks, and a stall."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import run_scripts

from gpudoctor.records.rundir import load_run

SRC = Path(__file__).resolve().parents[2] / "src"


def _run(tmp_path: Path, *args: str, timeout: float = 240) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPUDOCTOR_")}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(SRC), env.get("PYTHONPATH", "")) if p)
    env["OMP_NUM_THREADS"] = "1"
    return subprocess.run([sys.executable, "-m", "gpudoctor", "run", *args], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=timeout)


@pytest.mark.distributed
def test_mp_spawn_ranks_are_probed_with_their_rank(tmp_path: Path) -> None:
    (tmp_path / "spawn.py").write_text(run_scripts.MP_SPAWN, encoding="utf-8")
    result = _run(tmp_path, "--full", "--no-profile", "--json", "--fail-on", "never", "--out", "rd", "--",
                  sys.executable, "spawn.py")
    assert result.returncode == 0, result.stderr[-3000:]
    run = load_run(tmp_path / "rd")
    assert run.manifest.ranks == (0, 1) and run.manifest.steps_recorded == (12, 12)
    for rank in (0, 1):
        assert all(s.rank == rank for s in run.steps[rank])
        config = run.configs[rank]
        assert (config.rank, config.world_size, config.backend) == (rank, 2, "gloo")
        assert config.ddp is not None and config.ddp.kind == "ddp"


@pytest.mark.distributed
def test_torchrun_stall_names_the_stuck_rank_and_the_waiting_one(tmp_path: Path) -> None:
    torchrun = shutil.which("torchrun") or str(Path(sys.executable).with_name("torchrun"))
    (tmp_path / "hang.py").write_text(run_scripts.RANK1_HANGS, encoding="utf-8")
    result = _run(tmp_path, "--full", "--no-profile", "--stall-timeout", "4", "--json", "--out", "rd", "--",
                  torchrun, "--standalone", "--nproc_per_node", "2", "hang.py")
    assert result.returncode == 1, result.stderr[-3000:]
    payload = json.loads(result.stdout)
    assert payload["manifest"]["status"] == "stalled"
    (stall,) = [f for f in payload["findings"] if f["code"] == "GD-RUN-STALL"]
    assert "rank 1 stuck at" in stall["title"] and "hang.py:15 in <module>" in stall["title"]
    assert "rank 0 waited for it" in stall["title"]
    evidence = "\n".join(stall["evidence"])
    assert "rank 0 (10 steps): waiting in all_reduce" in evidence
    assert "rank 1 (10 steps): stalled here" in evidence
    run = load_run(tmp_path / "rd")
    assert set(run.stacks) == {0, 1}
