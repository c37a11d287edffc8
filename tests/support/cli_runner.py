"""Run the gpudoctor command line in a subprocess, as a user would, from this checkout's sources."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

SRC = Path(__file__).resolve().parents[2] / "src"


def env() -> dict[str, str]:
    """The environment without any GPUDOCTOR_* variable, with this checkout first on the path."""
    out = {k: v for k, v in os.environ.items() if not k.startswith("GPUDOCTOR_")}
    out["PYTHONPATH"] = os.pathsep.join(p for p in (str(SRC), out.get("PYTHONPATH", "")) if p)
    return out


def gpudoctor(*args: str, cwd: Path, timeout: float = 120) -> subprocess.CompletedProcess:
    """``python -m gpudoctor ARGS`` in ``cwd``; text output captured."""
    return subprocess.run([sys.executable, "-m", "gpudoctor", *args], cwd=cwd, env=env(),
                          capture_output=True, text=True, timeout=timeout)


def torchrun() -> str:
    """The torchrun of this Python."""
    return shutil.which("torchrun") or str(Path(sys.executable).with_name("torchrun"))


def run_two_gloo_ranks(script: str, tmp_path: Path, *, steps: int = 12) -> dict[str, dict]:
    """``gpudoctor run --steps N --json`` over ``torchrun --nproc_per_node 2`` of ``script``
    (written to ``tmp_path/ddp.py``; the run directory is ``tmp_path/rd``): its findings by code."""
    (tmp_path / "ddp.py").write_text(script, encoding="utf-8")
    run_env = env()
    run_env["OMP_NUM_THREADS"] = "1"
    result = subprocess.run(
        [sys.executable, "-m", "gpudoctor", "run", "--steps", str(steps), "--no-profile", "--json",
         "--fail-on", "never", "--out", "rd", "--",
         torchrun(), "--standalone", "--nproc_per_node", "2", "ddp.py"],
        cwd=tmp_path, env=run_env, capture_output=True, text=True, timeout=240,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return {f["code"]: f for f in json.loads(result.stdout)["findings"]}
