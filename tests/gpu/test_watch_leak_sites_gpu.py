"""On a real GPU: ``gpudoctor.watch`` names a leak's allocation site, as plain ``run`` does.

The planted leak of ``run``'s GPU test (``LEAK_TRAIN``: ``remember`` keeps 1 MiB every step),
inside ``with gpudoctor.watch(steps=40)`` in a fresh Python process: the in-process probes see the
allocated bytes grow at the step boundary, record allocation history for a few steps (clear of
the profiler window), and the watch's leak finding names the line; the loop goes on unobserved
after the 40 steps. Figures (the sites, and the step times while history was on against the
others) are printed (run with -s) and, with JOB_OUT set, written as JSON.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.support.gpu import LEAK_TRAIN, assert_leak_site_named, leak_site_figures, save_figures

torch = pytest.importorskip("torch")
pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
]

SRC = Path(__file__).resolve().parents[2] / "src"

# The user's own file (the site is named by its file and line): LEAK_TRAIN inside the watch, then
# what the watch found and whether the allocator still records stacks (it must not: the loop went
# on after the 40 watched steps, and so would any code after the block).
SCRIPT = (
    "import json\n"
    "import gpudoctor\n"
    "from gpudoctor.core.memory_history import history_enabled\n"
    "from gpudoctor.records.base import to_dict\n"
    "watcher = gpudoctor.watch(steps=40, run_dir='rd', quiet=True)\n"
    "with watcher:\n" + textwrap.indent(LEAK_TRAIN, "    ")
    + "with open('watch.json', 'w') as out:\n"
    "    json.dump({'status': watcher.status, 'history_left_on': history_enabled(),\n"
    "               'findings': [to_dict(f) for f in watcher.findings]}, out)\n"
)


def test_watch_names_the_leaking_line(tmp_path: Path) -> None:
    (tmp_path / "train.py").write_text(SCRIPT, encoding="utf-8")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in (str(SRC), os.environ.get("PYTHONPATH", "")) if p))
    result = subprocess.run([sys.executable, "train.py"], cwd=tmp_path, env=env, capture_output=True,
                            text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    payload = json.loads((tmp_path / "watch.json").read_text(encoding="utf-8"))
    leak = [f for f in payload["findings"] if f["code"] == "GD-RUN-MEM-LEAK"]
    figures = leak_site_figures(tmp_path / "rd")

    from gpudoctor.analysis.run_stats import run_stats
    from gpudoctor.records.base import to_dict
    from gpudoctor.records.rundir import load_run

    (stats,) = run_stats(load_run(tmp_path / "rd"))
    save_figures("watch_leak_site.json", {
        "status": payload["status"], "finding": leak, "history_left_on": payload["history_left_on"], **figures,
        "stats": to_dict(stats),
    })
    assert payload["status"] == "stopped", payload["status"]  # 40 steps watched, the loop went on
    assert payload["history_left_on"] is False
    assert_leak_site_named(leak, figures, list(stats.history_steps))
