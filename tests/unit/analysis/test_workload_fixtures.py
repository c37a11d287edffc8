"""Each workload recorded on a real GPU (``tests/fixtures/runs/<workload>/``, made by
``tools/gpu/jobs/40_run_workloads.sh``) gets its planted problem as the top finding, and the clean
baseline gets no warning. Picks fixtures up as they are committed."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpudoctor.analysis.diagnose import diagnose
from gpudoctor.records.finding import Severity
from gpudoctor.records.rundir import load_run
from gpudoctor.workloads import WORKLOADS

RUNS = Path(__file__).resolve().parents[2] / "fixtures" / "runs"


def _recorded() -> list:
    dirs = sorted(p for p in RUNS.glob("*/") if p.is_dir() and p.name in WORKLOADS) if RUNS.is_dir() else []
    if not dirs:
        return [pytest.param(None, marks=pytest.mark.skip(
            reason="no recorded workload runs under tests/fixtures/runs/ yet "
                   "(tools/gpu/jobs/40_run_workloads.sh makes them)"))]
    return [pytest.param(p, id=p.name) for p in dirs]


@pytest.mark.parametrize("run_dir", _recorded())
def test_recorded_workload_top_finding(run_dir: Path) -> None:
    workload = WORKLOADS[run_dir.name]
    findings = diagnose(load_run(run_dir))
    if workload.planted is None:
        assert [f.code for f in findings if f.severity is not Severity.INFO] == []
    else:
        assert findings, f"{run_dir.name}: no finding, expected {workload.planted}"
        assert findings[0].code == workload.planted, [f.code for f in findings]


CPU_RUNS = RUNS.parent / "runs_cpu"


@pytest.mark.parametrize("run_dir", sorted(p for p in CPU_RUNS.glob("*/") if p.is_dir()),
                         ids=lambda p: p.name)
def test_cpu_recorded_workload(run_dir: Path) -> None:
    """Runs recorded with `gpudoctor run --steps 30` on this 2-core CPU machine (``--size tiny``):
    the CPU-only note, no GPU rule, and the planted problem first where a CPU can show it."""
    workload = WORKLOADS[run_dir.name]
    findings = diagnose(load_run(run_dir))
    codes = [f.code for f in findings]
    assert "GD-RUN-CPU-ONLY" in codes
    if workload.planted is None:
        assert [f.code for f in findings if f.severity is not Severity.INFO] == []
    else:
        assert codes[0] == workload.planted, codes


def test_cpu_recorded_basic_user_view(golden) -> None:
    import io

    from rich.console import Console

    from gpudoctor.report.findings_view import render_findings

    run = load_run(CPU_RUNS / "basic_user")
    console = Console(file=io.StringIO(), width=100, color_system=None)
    console.print(render_findings(run, diagnose(run)))
    golden("analysis/findings_cpu_basic_user.txt", console.file.getvalue())
