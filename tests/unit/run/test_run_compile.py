"""``gpudoctor run`` on scripts that compile: compile time is progress, not a stall (CPU, the
real launcher; the compilations are TorchDynamo's own compile callbacks around a sleep)."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import run_scripts
from cli_runner import gpudoctor

from gpudoctor.records.rundir import load_run


def _run(tmp_path: Path, script: str, *options: str) -> tuple[object, dict]:
    (tmp_path / "train.py").write_text(script, encoding="utf-8")
    # --steps 10 of the scripts' 12: gpudoctor ends the script right at its 10th step, so a loaded
    # machine's slow interpreter exit cannot count against the short stall limits used here
    result = gpudoctor("run", "--steps", "10", "--no-profile", "--json", "--out", "rd", "--fail-on", "never",
                       *options, "--", sys.executable, "train.py", cwd=tmp_path, timeout=300)
    return result, json.loads(result.stdout)


def test_a_compile_longer_than_the_stall_limit_is_not_a_stall_and_is_reported(tmp_path: Path) -> None:
    result, payload = _run(tmp_path, run_scripts.SLOW_COMPILE.format(seconds=8), "--stall-timeout", "3")
    assert result.returncode == 0, result.stderr[-2000:]
    assert payload["manifest"]["status"] == "stopped"
    assert "compiling (" in result.stderr  # the progress line said so while it compiled
    (stats,) = payload["stats"]
    assert stats["compile_steps"] == [0, 5] and 8.0 <= stats["compile_s"] < 40
    assert stats["compile"].startswith("rank 0: compiling (torch.compile) took ")
    assert stats["compile"].endswith("in steps 0, 5")
    steps = load_run(tmp_path / "rd").steps[0]
    assert steps[5].compile_ms >= 8000 and steps[1].compile_ms == 0.0
    assert not any(f["code"] == "GD-RUN-STALL" for f in payload["findings"])


def test_a_compile_that_hangs_is_stopped_by_the_compile_limit(tmp_path: Path) -> None:
    started = time.monotonic()
    result, payload = _run(tmp_path, run_scripts.SLOW_COMPILE.format(seconds=10**6),
                           "--stall-timeout", "3", "--compile-timeout", "5")
    assert time.monotonic() - started < 120
    assert result.returncode == 1, result.stderr[-2000:]
    assert "stuck compiling at step 5: torch.compile compiled for 5 s" in result.stderr
    manifest = payload["manifest"]
    assert manifest["status"] == "stalled" and manifest["compiling"] is True
    assert manifest["compile_limit_s"] == 5.0 and manifest["compile_s"] >= 5.0
    assert any(n.startswith("stopped while compiling: torch.compile had compiled for ") for n in manifest["notes"])
    (stall,) = [f for f in payload["findings"] if f["code"] == "GD-RUN-STALL"]
    assert stall["title"].startswith("Stuck compiling at step 5: torch.compile compiled for ")
    assert "(--compile-timeout 5 s)" in stall["title"] and "--compile-timeout 10" in stall["fix"]


def test_a_script_that_never_compiles_writes_no_compile_event(tmp_path: Path) -> None:
    result, payload = _run(tmp_path, run_scripts.NO_COMPILE)
    assert result.returncode == 0, result.stderr[-2000:]
    assert not list((tmp_path / "rd").glob("compile-pid*"))
    assert payload["stats"][0]["compile"] is None and "compiling" not in result.stderr
    # torch 2.14 imports TorchDynamo at a module's first call: the callbacks are there, never called
    assert all(s.compile_ms in (None, 0.0) for s in load_run(tmp_path / "rd").steps[0])
