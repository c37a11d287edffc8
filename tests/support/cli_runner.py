"""Run the gpudoctor command line in a subprocess, as a user would, from this checkout's sources."""

from __future__ import annotations

import os
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
