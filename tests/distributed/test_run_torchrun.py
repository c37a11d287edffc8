"""``gpudoctor run -- torchrun --standalone --nproc_per_node 2 x.py``: 2 gloo ranks on the CPU."""

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
