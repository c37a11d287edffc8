"""On a real GPU: plain ``gpudoctor run`` (no memory mode) names a leak's allocation site.

The probes see the allocated bytes grow at the step boundary, record allocation history for a
few steps (clear of the profiler window), and the leak finding names the line that keeps 1 MiB
every step. Figures (the sites, and the step times while history was on against the others) are
printed (run with -s) and, with JOB_OUT set, written as JSON.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.gpu import LEAK_TRAIN, assert_leak_site_named, leak_site_figures, save_figures

torch = pytest.importorskip("torch")
pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
]

SRC = Path(__file__).resolve().parents[2] / "src"


def test_plain_run_names_the_leaking_line(tmp_path: Path) -> None:
    (tmp_path / "train.py").write_text(LEAK_TRAIN, encoding="utf-8")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in (str(SRC), os.environ.get("PYTHONPATH", "")) if p))
    result = subprocess.run(
        [sys.executable, "-m", "gpudoctor", "run", "--steps", "40", "--json", "--fail-on", "never",
         "--out", "rd", "--", sys.executable, "train.py"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    payload = json.loads(result.stdout)
    leak = [f for f in payload["findings"] if f["code"] == "GD-RUN-MEM-LEAK"]
    figures = leak_site_figures(tmp_path / "rd")
    save_figures("run_leak_site.json", {"finding": leak, **figures, "stats": payload.get("stats")})
    (stats,) = payload["stats"]
    assert_leak_site_named(leak, figures, stats["history_steps"])
