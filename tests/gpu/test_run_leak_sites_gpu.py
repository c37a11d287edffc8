"""On a real GPU: plain ``gpudoctor run`` (no memory mode) names a leak's allocation site.

The probes see the allocated bytes grow at the step boundary, record allocation history for a
few steps (clear of the profiler window), and the leak finding names the line that keeps 1 MiB
every step. Figures (the sites, and the step times while history was on against the others) are
printed (run with -s) and, with JOB_OUT set, written as JSON.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.gpu import LEAK_TRAIN, save_figures

torch = pytest.importorskip("torch")
pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
]

MIB = 1 << 20
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
    sites_path = tmp_path / "rd" / "leak-sites-rank0.json"
    sites = json.loads(sites_path.read_text())["data"] if sites_path.exists() else None

    from gpudoctor.records.rundir import load_run

    run = load_run(tmp_path / "rd")
    steps = {s.step: s.step_ms for s in run.steps[0]}
    history = sites.get("history_steps") if sites else None
    recorded = set(range(history[0], history[1] + 1)) if history else set()
    window = tuple(run.manifest.profile_window)
    others = [ms for step, ms in steps.items() if step >= 5 and step not in recorded
              and not (window and window[0] <= step <= window[1])]
    save_figures("run_leak_site.json", {
        "finding": leak, "leak_sites": sites, "profile_window": window,
        "step_ms_history_on": {step: steps[step] for step in sorted(recorded) if step in steps},
        "step_ms_median_other_steady": statistics.median(others) if others else None,
        "stats": payload.get("stats"),
    })
    assert leak, payload["findings"]
    assert sites is not None, "no leak-sites-rank0.json: the history was never turned on"
    top = sites["sites"][0]
    assert "train.py" in top["site"] and top["site"].endswith("remember"), sites
    grew, span = top["bytes_to"] - top["bytes_from"], sites["step_to"] - sites["step_from"]
    assert abs(grew / span - MIB) < 0.05 * MIB, (grew, span)  # 1 MiB per step, as planted
    assert "remember" in leak[0]["title"]
    # the history (on from the boundary before step_from) stayed out of the profiler window
    assert window and sites["step_to"] < window[0] - 1, (sites, window)
    # the steps that ran with it are named in the record and left out of the steady figures
    assert tuple(history) == (sites["step_from"], sites["step_to"]), sites
    (stats,) = payload["stats"]
    assert stats["history_steps"] == sorted(recorded), stats
