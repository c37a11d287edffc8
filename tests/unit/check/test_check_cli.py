"""``gpudoctor check`` through typer's CliRunner (facts injected with ``--facts``), and one real
run on this machine."""

from __future__ import annotations

import json
import os
import resource
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from gpudoctor.cli.app import app
from gpudoctor.records.base import to_dict

runner = CliRunner()


def _facts_file(tmp_path: Path, facts) -> Path:
    path = tmp_path / "facts.json"
    path.write_text(json.dumps(to_dict(facts)))
    return path


def test_healthy_facts_exit_0_with_table(tmp_path, facts_factory):
    result = runner.invoke(app, ["check", "--facts", str(_facts_file(tmp_path, facts_factory.healthy(2)))])
    assert result.exit_code == 0, result.output
    assert "nccl.allreduce" in result.output and "PASS: 2 GPU(s) ready" in result.output


def test_failing_facts_exit_1_and_json_round_trips(tmp_path, facts_factory):
    path = _facts_file(tmp_path, facts_factory.cpu_only())
    result = runner.invoke(app, ["check", "--json", "--facts", str(path)])
    assert result.exit_code == 1
    payload = json.loads(result.stdout)
    assert payload["kind"] == "gpudoctor.check" and payload["verdict"] == "fail"
    rows = {r["name"]: r for r in payload["results"]}
    assert rows["driver.loaded"]["verdict"] == "fail" and rows["driver.loaded"]["layer"] == "driver"
    # a --json output is itself accepted by --facts (re-judge facts recorded elsewhere)
    again = tmp_path / "out.json"
    again.write_text(result.stdout)
    assert runner.invoke(app, ["check", "--json", "--facts", str(again)]).exit_code == 1
    for fail_on, code in (("error", 1), ("never", 0)):  # a FAIL row is an error finding
        assert runner.invoke(app, ["check", "--fail-on", fail_on, "--facts", str(again)]).exit_code == code


@pytest.mark.parametrize("option", ["--out", "-o", "--freeze"])  # --freeze: the earlier name, hidden
def test_freeze_then_against(tmp_path, facts_factory, option):
    import dataclasses

    frozen = tmp_path / "env.json"
    healthy = facts_factory.healthy(1)
    result = runner.invoke(app, ["check", "--facts", str(_facts_file(tmp_path, healthy)),
                                 option, str(frozen)])
    assert result.exit_code == 0 and frozen.exists()
    assert ("is now --out" in result.stderr) == (option == "--freeze")
    assert json.loads(frozen.read_text())["data"]["torch_variant"] == "cu130"
    moved = dataclasses.replace(healthy, torch=dataclasses.replace(healthy.torch, version="2.12.0+cu130"))
    args = ["check", "--json", "--facts", str(_facts_file(tmp_path, moved)), "--against", str(frozen)]
    result = runner.invoke(app, args)
    assert result.exit_code == 1  # a version difference warns: at the default --fail-on warn, exit 1
    assert runner.invoke(app, [*args, "--fail-on", "error"]).exit_code == 0  # it does not fail
    diffs = json.loads(result.stdout)["differences"]
    assert [(d["field"], d["here"], d["there"]) for d in diffs] == [
        ("torch", "2.12.0+cu130", "2.11.0+cu130")]


@pytest.mark.parametrize("args,words", [
    (["--timeout", "0"], "--timeout must be a positive"),
    (["--against", "does-not-exist.json"], "write one with `gpudoctor check --out"),
])
def test_usage_errors_exit_2(args, words):
    result = runner.invoke(app, ["check", *args])
    assert result.exit_code == 2
    assert words in result.output


def test_bad_facts_file_exits_2(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text("{\"driver\": 3}")
    result = runner.invoke(app, ["check", "--facts", str(bad)])
    assert result.exit_code == 2 and "does not hold check facts" in result.output


@pytest.mark.skipif(shutil.which("nvidia-smi") is not None, reason="this test is for a GPU-less machine")
def test_real_run_on_this_cpu_machine_is_right_and_fast():
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    out = subprocess.run([sys.executable, "-m", "gpudoctor", "check", "--json"],
                         capture_output=True, text=True, timeout=60)
    elapsed = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)  # includes the probe it waited for
    cpu_s = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    assert out.returncode == 1, out.stderr
    payload = json.loads(out.stdout)
    rows = {r["name"]: r for r in payload["results"]}
    assert rows["driver.loaded"]["verdict"] == "fail"
    assert rows["torch.cuda_available"]["verdict"] in ("fail", "skip")
    assert "training would run on the CPU" in payload["summary"]
    assert payload["facts"]["probe"]["status"] == "ok"
    assert cpu_s < 5.0, f"gpudoctor check used {cpu_s:.1f} s of CPU"
    # Wall time is only meaningful when the machine is not oversubscribed (CI shares 2 cores).
    if os.getloadavg()[0] <= (os.cpu_count() or 1):
        assert elapsed < 5.0, f"gpudoctor check took {elapsed:.1f} s on this CPU machine"
