"""Re-reading a run directory leaves it as it was: `diagnose` and `report` print (and `report`
writes its HTML where told) but do not rewrite findings.json; `diagnose --save` does."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from gpudoctor.cli.app import app

RUNS = Path(__file__).resolve().parents[2] / "fixtures" / "runs"
runner = CliRunner()


def _digests(path: Path) -> dict[str, str]:
    return {str(p.relative_to(path)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(path.rglob("*")) if p.is_file()}


@pytest.fixture
def stale_run(tmp_path: Path) -> Path:
    """A run whose findings.json was made by another analysis, so every view re-analyses."""
    path = tmp_path / "run"
    shutil.copytree(RUNS / "basic_user", path)
    stored = json.loads((path / "findings.json").read_text())
    stored["data"]["analysis_version"] = "0.0.1-an-older-analysis"
    (path / "findings.json").write_text(json.dumps(stored))
    return path


@pytest.mark.parametrize("args", [["diagnose", "{run}"], ["diagnose", "{run}", "--json"],
                                  ["report", "{run}", "-o", "{out}"]])
def test_reanalysis_writes_nothing_into_the_run_directory(stale_run: Path, tmp_path: Path,
                                                          args: list[str]) -> None:
    before = _digests(stale_run)
    argv = [a.format(run=stale_run, out=tmp_path / "r.html") for a in args]
    result = runner.invoke(app, [*argv, "--fail-on", "never"] if args[0] == "diagnose" else argv)
    assert result.exit_code == 0, result.output
    assert _digests(stale_run) == before


def test_diagnose_save_stores_todays_findings(stale_run: Path) -> None:
    from gpudoctor.cli.diagnose import analysis_version

    result = runner.invoke(app, ["diagnose", str(stale_run), "--save", "--fail-on", "never"])
    assert result.exit_code == 0, result.output
    stored = json.loads((stale_run / "findings.json").read_text())["data"]
    assert stored["analysis_version"] == analysis_version()


def test_save_refuses_several_run_directories(stale_run: Path) -> None:
    result = runner.invoke(app, ["diagnose", str(stale_run), str(RUNS / "basic_user"), "--save"])
    assert result.exit_code == 2
    assert "--save takes one RUN_DIR" in result.output
