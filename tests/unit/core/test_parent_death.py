"""kill -9 of `gpudoctor run` takes the training script with it (no orphan under init)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.support.cli_runner import env

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux's")


def _alive(pid: int) -> bool:
    """Running, not a zombie (an orphan's zombie waits for init, which a container may not run)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return False
    return state not in ("Z", "X")


def _wait_for(predicate, timeout_s: float) -> bool:
    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        if predicate():
            return True
        time.sleep(0.2)
    return predicate()


def test_killing_gpudoctor_run_ends_the_script(tmp_path: Path) -> None:
    script = ("import os, time\nopen('child.pid.tmp', 'w').write(str(os.getpid()))\n"
              "os.replace('child.pid.tmp', 'child.pid')\ntime.sleep(600)\n")
    (tmp_path / "sleeper.py").write_text(script, encoding="utf-8")
    parent = subprocess.Popen([sys.executable, "-m", "gpudoctor", "run", "--no-profile", "-o", "rd",
                               "--", sys.executable, "sleeper.py"], cwd=tmp_path, env=env(),
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    pid_file = tmp_path / "child.pid"
    try:
        assert _wait_for(pid_file.exists, 120), "the script never started"
        child = int(pid_file.read_text())
        assert _alive(child)
        parent.send_signal(signal.SIGKILL)
        parent.wait(timeout=30)
        assert _wait_for(lambda: not _alive(child), 60), f"pid {child} still runs without gpudoctor"
    finally:
        parent.kill()
        if pid_file.exists() and _alive(int(pid_file.read_text())):
            os.kill(int(pid_file.read_text()), signal.SIGKILL)


def test_the_child_keeps_running_while_its_parent_lives(tmp_path: Path) -> None:
    from gpudoctor.core.parent_death import die_with_parent

    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(2)"],
                            preexec_fn=die_with_parent())
    assert proc.wait(timeout=60) == 0  # not signalled: its parent (this test) is alive
