"""``tune()`` under torchrun leaves a process group it did not create: a script that tunes and then
keeps training (or measuring, as benchmarks/tune_ddp.py does) must not lose its group."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

HELPER = Path(__file__).with_name("group_owner.py")
SRC = Path(__file__).resolve().parents[3] / "src"


@pytest.mark.distributed
def test_a_callers_process_group_survives_tune() -> None:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(SRC), os.environ.get("PYTHONPATH", "")])}
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2", str(HELPER)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=180, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    # the two ranks' lines may interleave on the shared stdout: find them anywhere
    assert sorted(re.findall(r"GROUP_KEPT rank=\d sum=\d", proc.stdout)) == [
        "GROUP_KEPT rank=0 sum=2", "GROUP_KEPT rank=1 sum=2"], proc.stdout[-2000:]
