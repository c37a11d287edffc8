"""Every recorded fixture's ``findings.json`` equals what today's analysis makes of its records.

A rule change that moves a finding shows up here first. After reviewing the change, refresh the
stored findings (stamped with today's ``analysis_version``) with::

    pytest --update-goldens tests/unit/analysis/test_fixture_findings.py

Only files whose findings differ are rewritten, so unchanged fixtures keep their bytes.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from gpudoctor.analysis.diagnose import diagnose
from gpudoctor.cli.diagnose import analysis_version
from gpudoctor.records.base import write_json
from gpudoctor.records.rundir import FINDINGS, KIND_FINDINGS, FindingList, load_run

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"
# every recorded run under tests/fixtures that stores findings (runs, runs_cpu, fix/corpus_runs, ...)
RUNS = sorted(p.parent for p in FIXTURES.rglob(FINDINGS))


def test_the_fixtures_carry_findings() -> None:
    assert len(RUNS) >= 26, RUNS


@pytest.mark.parametrize("run_dir", RUNS, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_stored_findings_equal_todays_analysis(run_dir: Path, request: pytest.FixtureRequest) -> None:
    run = load_run(run_dir)
    today = tuple(diagnose(run))
    if request.config.getoption("--update-goldens"):
        if run.findings != today or not run.findings_version:
            write_json(run_dir / FINDINGS, FindingList(findings=today, analysis_version=analysis_version()),
                       kind=KIND_FINDINGS)
        return
    assert run.findings_version, f"{run_dir}: findings.json has no analysis_version; refresh it (see above)"
    assert [f.code for f in run.findings] == [f.code for f in today], "refresh with --update-goldens after review"
    assert run.findings == today, "refresh with pytest --update-goldens tests/unit/analysis/test_fixture_findings.py"
