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


MULTI_GPU_SUFFIX = "-2gpu"  # the torchrun workloads recorded again with one rank per GPU on 2 H200s


def _workload_name(run_dir: Path) -> str:
    return run_dir.name.removesuffix(MULTI_GPU_SUFFIX)


def _recorded() -> list:
    dirs = sorted(p for p in RUNS.glob("*/") if p.is_dir() and _workload_name(p) in WORKLOADS) if RUNS.is_dir() else []
    if not dirs:
        return [pytest.param(None, marks=pytest.mark.skip(
            reason="no recorded workload runs under tests/fixtures/runs/ yet "
                   "(tools/gpu/jobs/40_run_workloads.sh makes them)"))]
    return [pytest.param(p, id=p.name) for p in dirs]


@pytest.mark.parametrize("run_dir", _recorded())
def test_recorded_workload_top_finding(run_dir: Path) -> None:
    workload = WORKLOADS[_workload_name(run_dir)]
    findings = diagnose(load_run(run_dir))
    if workload.planted is None:
        assert [f.code for f in findings if f.severity is not Severity.INFO] == []
    else:
        assert findings, f"{run_dir.name}: no finding, expected {workload.planted}"
        assert findings[0].code == workload.planted, [f.code for f in findings]
        # a note is not a verdict: the planted problem must be worth acting on
        assert findings[0].severity is not Severity.INFO, findings[0].title


# Recordings of an earlier version of a workload, kept under a name that says what they show: the
# workload changed after them (see its docstring), so they no longer stand for it, but they are
# still real H200 numbers the analysis must read right. name -> (codes, severities) expected.
EARLIER_RECORDINGS = {
    # the tuned CNN at batch 256: GPU busy 5.23 ms of a 6.12 ms median step, 53% of the kernels
    # under 10 us; 11.2% of the step idle, under the 15% from which launch overhead matters.
    # It once got a 40.1% GD-RUN-LAUNCH-BOUND from the profiler-slowed window (9.26 ms a step).
    "clean-b256-marginal": ([], []),
    # two syncs every step, but GPU work (8.34 ms of an 8.66 ms step) hides them: a note, no gain
    "item_every_step-gpu-bound": (["GD-RUN-HOST-SYNC"], [Severity.INFO]),
}


@pytest.mark.parametrize("name", sorted(EARLIER_RECORDINGS))
def test_earlier_recordings(name: str) -> None:
    run_dir = RUNS / name
    if not run_dir.is_dir():
        pytest.skip(f"{run_dir} is not committed")
    findings = diagnose(load_run(run_dir))
    codes, severities = EARLIER_RECORDINGS[name]
    assert [f.code for f in findings] == codes
    assert [f.severity for f in findings] == severities
    assert all(f.expected_gain is None for f in findings if f.severity is Severity.INFO)


def test_earlier_gpu_bound_syncs_note_quotes_the_numbers() -> None:
    run_dir = RUNS / "item_every_step-gpu-bound"
    if not run_dir.is_dir():
        pytest.skip(f"{run_dir} is not committed")
    (note,) = diagnose(load_run(run_dir))
    # the mean step (8.56 ms) with the GPU busy 97.3% of it: 2.7% left idle by the host
    assert note.title == "2 host sync(s) per step cost at most 2.7% of it here: too little to act on"
    assert note.evidence[1].startswith("GPU busy 97.3% of a 8.56 ms mean step")


CPU_RUNS = RUNS.parent / "runs_cpu"


@pytest.mark.parametrize("run_dir", sorted(p for p in CPU_RUNS.glob("*/") if p.is_dir()),
                         ids=lambda p: p.name)
def test_cpu_recorded_workload(run_dir: Path) -> None:
    """Runs recorded with `gpudoctor run --steps 30` on this 2-core CPU machine (``--size tiny``):
    the CPU-only note, no GPU rule, and the planted problem first where a CPU can show it."""
    workload = WORKLOADS[_workload_name(run_dir)]
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
