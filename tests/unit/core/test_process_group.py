"""``run_process_group``: a launcher's whole process tree goes on a timeout, not just the launcher."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from gpudoctor.core.process_group import run_process_group

# A stand-in for torchrun: starts a worker (its child) that outlives it unless the group is killed,
# writes the worker's pid, then waits.
LAUNCHER = """
import subprocess, sys, time
worker = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
open(sys.argv[1], "w").write(str(worker.pid))
time.sleep(60)
"""


def _alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def test_output_and_exit_code_come_back_from_its_own_group() -> None:
    code = "import os, sys; print(os.getpgid(0) == os.getpid()); sys.stderr.write('err'); sys.exit(3)"
    proc = run_process_group([sys.executable, "-c", code], timeout_s=60)
    assert (proc.returncode, proc.stdout.strip(), proc.stderr) == (3, "True", "err")


def test_timeout_kills_the_launchers_children_too(tmp_path: Path) -> None:
    pid_file = tmp_path / "worker.pid"
    with pytest.raises(subprocess.TimeoutExpired):
        # 5 s: ample for two interpreters to start on a busy host
        run_process_group([sys.executable, "-c", LAUNCHER, str(pid_file)], timeout_s=5)
    worker = int(pid_file.read_text())
    deadline = time.monotonic() + 10
    while _alive(worker) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _alive(worker), f"worker {worker} survived the launcher's timeout"
