"""``gpudoctor lint`` end to end: text golden over a small tree, JSON, SARIF, exit codes."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from gpudoctor.cli.app import app
from gpudoctor.lint.registry import ALL_RULES
from gpudoctor.records.base import from_dict
from gpudoctor.records.lint import LintReport

TREE = Path(__file__).resolve().parents[2] / "fixtures" / "lint_tree"
runner = CliRunner()


def _invoke(args: list[str]):
    return runner.invoke(app, ["lint", *args])


def test_text_output_over_a_tree_matches_golden(golden, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(TREE)
    result = _invoke(["."])
    assert result.exit_code == 1
    golden("lint/tree_text.txt", result.stdout)


def test_statistics_match_golden(golden, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(TREE)
    result = _invoke([".", "--statistics"])
    assert result.exit_code == 1
    golden("lint/tree_statistics.txt", result.stdout)


def test_exit_codes() -> None:
    assert _invoke([str(TREE / "clean.py")]).exit_code == 0
    assert _invoke([str(TREE / "train.py")]).exit_code == 1
    assert _invoke([str(TREE / "broken.py")]).exit_code == 1
    assert _invoke([str(TREE / "train.py"), "--select", "GD4"]).exit_code == 0


@pytest.mark.parametrize("args", [["does/not/exist.py"], ["--select", "GD777", "."], ["--format", "xml", "."]])
def test_usage_errors_exit_2(args: list[str]) -> None:
    from gpudoctor.cli.app import main

    # main() maps GpuDoctorUserError to exit code 2, as the console script does
    import sys

    argv = sys.argv
    sys.argv = ["gpudoctor", "lint", *args]
    try:
        with pytest.raises(SystemExit) as exc:
            main()
    finally:
        sys.argv = argv
    assert exc.value.code == 2


def test_json_output_round_trips() -> None:
    for args in (["--format", "json"], ["--json"]):
        result = _invoke([str(TREE), *args])
        assert result.exit_code == 1
        payload = json.loads(result.stdout)
        assert payload["schema_version"] == 1
        report = from_dict(LintReport, payload)
        assert report.files_checked == 5
        assert {v.code for v in report.violations} >= {"E999", "GD101", "GD102", "GD104", "GD201", "GD204"}


def test_sarif_has_the_2_1_0_structure() -> None:
    result = _invoke([str(TREE), "--format", "sarif"])
    assert result.exit_code == 1
    log = json.loads(result.stdout)
    assert log["version"] == "2.1.0" and log["$schema"].endswith("sarif-2.1.0.json")
    (run,) = log["runs"]
    driver = run["tool"]["driver"]
    assert driver["name"] == "gpudoctor"
    ids = [rule["id"] for rule in driver["rules"]]
    assert ids == sorted(rule.CODE for rule in ALL_RULES)
    for rule in driver["rules"]:
        assert rule["shortDescription"]["text"] and rule["fullDescription"]["text"]
        assert rule["defaultConfiguration"]["level"] in ("error", "warning", "note")
    assert run["results"]
    for res in run["results"]:
        assert res["level"] in ("error", "warning", "note")
        assert res["message"]["text"]
        loc = res["locations"][0]["physicalLocation"]
        assert loc["artifactLocation"]["uri"] and loc["region"]["startLine"] >= 1
        assert loc["region"]["startColumn"] >= 1
        if res["ruleId"].startswith("GD"):
            assert ids[res["ruleIndex"]] == res["ruleId"]


def test_fix_from_the_command_line(tmp_path: Path) -> None:
    shutil.copy(TREE / "train.py", tmp_path / "train.py")
    result = _invoke([str(tmp_path / "train.py"), "--fix", "--select", "GD101,GD204"])
    assert result.exit_code == 0, result.stdout
    text = (tmp_path / "train.py").read_text()
    assert "    x = x.to(device)\n" in text and "zero_grad()" in text
    assert "Fixed 2 violations" in result.stdout
