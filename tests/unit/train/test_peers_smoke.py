"""``benchmarks/peers.py --smoke`` on the CPU: every configuration the H200 re-run needs runs end to end.

The first H200 run crashed in ``gpt*/gpudoctor_compiled`` (a ``model -> optimizer`` factory handed to
the engine's ``params -> optimizer`` contract); this would have caught it before the GPU job.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
RERUN = ("resnet/plain,resnet/gpudoctor_defaults,resnet/gpudoctor_gpu_loader,gpt124m/hand_compiled,"
         "gpt124m/gpudoctor_compiled,gpt350m/gpudoctor_compiled")


def _peers(*args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src"), "CUDA_VISIBLE_DEVICES": ""}
    return subprocess.run([sys.executable, str(ROOT / "benchmarks" / "peers.py"), "--smoke", *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=240)


def test_smoke_runs_the_rerun_set_and_merges(tmp_path: Path) -> None:
    first = tmp_path / "first.json"
    done = _peers("--only", "resnet/plain,gpt124m/hand_compiled", "--out", str(first))
    assert done.returncode == 0, done.stderr[-2000:]
    merged = tmp_path / "merged.json"
    done = _peers("--only", RERUN.replace("resnet/plain,", ""), "--out", str(merged), "--merge-into", str(first))
    assert done.returncode == 0, done.stderr[-2000:]
    doc = json.loads(merged.read_text())
    results = doc["results"]
    assert set(results) == set(RERUN.split(","))
    for name, entry in results.items():
        assert "error" not in entry, (name, entry.get("traceback"))
        assert (entry.get("img_per_s") or entry.get("tok_per_s")) > 0, name
        assert entry["run_utc"], name
    first_run, second_run = (r["date_utc"] for r in doc["runs"])
    assert results["resnet/plain"]["run_utc"] == first_run  # kept from the earlier run
    assert results["gpt124m/gpudoctor_compiled"]["run_utc"] == second_run
    assert "gpt124m_engine_vs_hand_compiled (goal >= 1.0)" in doc["ratios"]  # recomputed over both runs
    assert "resnet_defaults_vs_best_peer (goal >= 1.0)" in doc["ratios"]


def test_only_rejects_unknown_names_and_smoke_merge_into_real_results(tmp_path: Path) -> None:
    done = _peers("--only", "resnet/nope")
    assert done.returncode == 2 and "resnet/nope" in done.stderr
    real = tmp_path / "real.json"
    real.write_text(json.dumps({"results": {}, "date_utc": "x"}))
    done = _peers("--only", "resnet/plain", "--merge-into", str(real), "--out", str(tmp_path / "o.json"))
    assert done.returncode == 2 and "real measurements" in done.stderr
