"""``gpudoctor report``: writes the HTML next to the run, honours -o, refuses bad input clearly."""

from __future__ import annotations

import json

from run_factory import make_findings, make_run
from typer.testing import CliRunner

from gpudoctor.cli.app import app
from gpudoctor.records import base, rundir

runner = CliRunner()


def _with_findings(path):
    base.write_json(path / rundir.FINDINGS, rundir.FindingList(findings=tuple(make_findings())),
                    kind=rundir.KIND_FINDINGS)
    return path


def test_report_default_path_and_json(tmp_path) -> None:
    run = _with_findings(make_run(tmp_path / "run"))
    result = runner.invoke(app, ["report", str(run), "--json"])
    assert result.exit_code == 0, result.output
    payload = json.loads(result.stdout)
    assert payload["report"] == str(run / "report.html")
    assert (run / "report.html").read_text().count("Data-loader bound") >= 1


def test_report_output_option(tmp_path) -> None:
    run = _with_findings(make_run(tmp_path / "run"))
    out = tmp_path / "elsewhere.html"
    result = runner.invoke(app, ["report", str(run), "-o", str(out)])
    assert result.exit_code == 0, result.output
    assert out.is_file() and "report written to" in result.stdout


def test_report_not_a_run_directory(tmp_path) -> None:
    result = runner.invoke(app, ["report", str(tmp_path)])
    assert result.exit_code == 2
    assert "is not a gpudoctor run directory" in result.output
    assert "gpudoctor run -- python train.py" in result.output


def test_report_corrupt_manifest(tmp_path) -> None:
    run = make_run(tmp_path / "run")
    (run / "manifest.json").write_text("{ truncated")
    result = runner.invoke(app, ["report", str(run)])
    assert result.exit_code == 2
    assert "not valid JSON" in result.output
