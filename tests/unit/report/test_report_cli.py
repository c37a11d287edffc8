"""``gpudoctor report``: writes the HTML next to the run, honours -o, refuses bad input clearly."""

from __future__ import annotations

import json

from run_factory import make_findings, make_run
from typer.testing import CliRunner

from gpudoctor.analysis.diagnose import diagnose
from gpudoctor.cli.app import app
from gpudoctor.cli.diagnose import analysis_version
from gpudoctor.records import base, rundir
from gpudoctor.records.finding import Finding, Severity

runner = CliRunner()


def _with_findings(path, version=None, findings=None):
    stored = rundir.FindingList(findings=tuple(findings or make_findings()),
                                analysis_version=analysis_version() if version is None else version)
    base.write_json(path / rundir.FINDINGS, stored, kind=rundir.KIND_FINDINGS)
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


STALE = Finding(code="GD-RUN-STALE", severity=Severity.ERROR, title="a finding an older analysis made")


def test_report_recomputes_findings_an_older_analysis_made(tmp_path) -> None:
    """report and diagnose show the same findings of one run: stale stored ones are recomputed."""
    run = _with_findings(make_run(tmp_path / "run"), version="0.0.1+000000000000", findings=[STALE])
    result = runner.invoke(app, ["report", str(run)])
    assert result.exit_code == 0, result.output
    html = (run / "report.html").read_text()
    assert "GD-RUN-STALE" not in html
    today = diagnose(rundir.load_run(run))
    assert today and all(f.code in html for f in today)
    stored = rundir.load_run(run)  # findings.json is left as it was: re-analysis writes nothing
    assert [f.code for f in stored.findings] == ["GD-RUN-STALE"]
    diagnosed = runner.invoke(app, ["diagnose", str(run), "--json"])
    assert [f["code"] for f in json.loads(diagnosed.stdout)["findings"]] == [f.code for f in today]


def test_report_recomputes_unversioned_findings(tmp_path) -> None:
    run = _with_findings(make_run(tmp_path / "run"), version="", findings=[STALE])
    assert runner.invoke(app, ["report", str(run)]).exit_code == 0
    assert "GD-RUN-STALE" not in (run / "report.html").read_text()


def test_analysis_version_names_the_release_and_a_digest() -> None:
    from gpudoctor import __version__

    version = analysis_version()
    head, _, digest = version.partition("+")
    assert head == __version__ and len(digest) == 12 and int(digest, 16) >= 0
    assert analysis_version() == version
