"""``gpudoctor diagnose RUNDIR``: re-analyse a recorded run (analysis is pure and re-runnable).

Also home of the small composition ``run``, ``diagnose``, ``doctor`` and ``report`` use: load a
run directory, diagnose it, write ``findings.json`` stamped with :func:`analysis_version`, hand a
view the current findings (:func:`current_findings`: the stored ones only when today's analysis
made them), render the summary and the findings.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
from importlib import resources
from pathlib import Path
from typing import Any

import typer

from gpudoctor.cli.output import FAIL_ON_HELP, FailOn
from gpudoctor.cli.pricing import price_option
from gpudoctor.cli.thresholds_option import current_thresholds, thresholds_option
from gpudoctor.errors import GpuDoctorUserError

# what the findings of a run depend on besides its records: the rules and the data they read
_ANALYSIS_SOURCES = (("gpudoctor.analysis", ".py"), ("gpudoctor.data", ".toml"))


def load(run_dir: Path) -> Any:
    """Load a run directory or raise :class:`GpuDoctorUserError` (exit 2) saying what is wrong."""
    from gpudoctor.records.base import NewerSchemaError, SchemaError
    from gpudoctor.records.rundir import load_run

    if not run_dir.is_dir():
        raise GpuDoctorUserError(f"{run_dir}: no such directory; pass a run directory made by gpudoctor run")
    try:
        return load_run(run_dir)
    except (FileNotFoundError, NewerSchemaError) as exc:  # the message says what to do
        raise GpuDoctorUserError(str(exc)) from None
    except SchemaError as exc:
        raise GpuDoctorUserError(f"{exc}; the run directory is damaged — record it again with gpudoctor run") from None


@functools.cache
def analysis_version() -> str:
    """``<gpudoctor version>+<12 hex>``: a digest of the analysis package's source and of the data
    it reads, so any change to a rule, a threshold or a datasheet figure gives a new version."""
    from gpudoctor import __version__

    digest = hashlib.sha256()
    for package, suffix in _ANALYSIS_SOURCES:
        for entry in sorted(resources.files(package).iterdir(), key=lambda e: e.name):
            if entry.name.endswith(suffix) and entry.is_file():
                digest.update(entry.name.encode() + b"\0" + entry.read_bytes() + b"\0")
    return f"{__version__}+{digest.hexdigest()[:12]}"


def findings_version(thresholds: Any) -> str:
    """:func:`analysis_version`, plus ``+thresholds-<12 hex>`` (a digest of the changed limits)
    when ``thresholds`` are not the defaults: findings made with a ``--thresholds`` file are
    never taken for today's default analysis."""
    from gpudoctor.analysis.thresholds import Thresholds

    changed = sorted((f.name, getattr(thresholds, f.name)) for f in dataclasses.fields(thresholds)
                     if getattr(thresholds, f.name) != getattr(Thresholds(), f.name))
    if not changed:
        return analysis_version()
    return f"{analysis_version()}+thresholds-{hashlib.sha256(repr(changed).encode()).hexdigest()[:12]}"


def analyse(run: Any, thresholds: Any = None, *, save: bool = False) -> list:
    """Diagnose ``run`` with ``thresholds`` (default: the command's ``--thresholds``, else the
    defaults); with ``save``, write ``findings.json`` stamped with :func:`findings_version`.
    Only the command that recorded the run, or a user's ``--save``, writes into it: re-reading a
    run directory (a checked-in fixture, a colleague's copy) must leave it as it was."""
    from gpudoctor.analysis.diagnose import diagnose
    from gpudoctor.records.base import write_json
    from gpudoctor.records.rundir import FINDINGS, KIND_FINDINGS, FindingList

    th = thresholds if thresholds is not None else current_thresholds()
    findings = list(diagnose(run, thresholds=th))
    stored = FindingList(findings=tuple(findings), analysis_version=findings_version(th))
    run.findings, run.findings_version = tuple(findings), stored.analysis_version
    if not save:
        return findings
    try:
        write_json(run.path / FINDINGS, stored, kind=KIND_FINDINGS)
    except OSError as exc:  # a read-only copy of a run: the diagnosis is still printed
        from gpudoctor.cli.output import stderr_console

        stderr_console().print(f"note: findings.json not written ({exc})", highlight=False, markup=False)
    return findings


def current_findings(run: Any) -> list:
    """The findings a view should show: the stored ones when today's analysis made them, else
    freshly computed (nothing written), so ``report`` and ``diagnose`` agree.
    Default thresholds: findings stored by a run with a ``--thresholds`` file are recomputed."""
    from gpudoctor.analysis.thresholds import Thresholds

    if run.findings is not None and run.findings_version == analysis_version():
        return list(run.findings)
    return analyse(run, Thresholds())


def render(run: Any, findings: list | None, console: Any, *, top: int = 5, price: float | None = None) -> None:
    """Print the run summary, then the findings (``None``: a run without steps or stacks, which
    has none); ``top``: how many of the profiler window's kernels and CPU ops to list;
    ``price``: a price per GPU-hour, for the cost block under the findings."""
    from gpudoctor.report.run_summary import render_summary

    view = findings is not None and bool(run.steps)
    summary = render_summary(run, full=not view)
    if summary.renderables:
        console.print(summary)
    if findings is None:
        return
    if view:
        from gpudoctor.report.findings_view import render_findings
        from gpudoctor.report.fit import print_whole

        print_whole(console, render_findings(run, findings, top=top, thresholds=current_thresholds()))  # fix code unwrapped
        render_cost(run, findings, console, price)
    else:
        for f in findings:
            console.print(f"[{f.severity.value}] {f.code}: {f.title}", highlight=False, markup=False)
            for line in f.evidence:  # a run without steps: the evidence is all there is (stacks)
                console.print(f"  - {line}", highlight=False, markup=False)


def costs(run: Any, findings: list | None, price: float | None, verified: Any = None) -> tuple[Any, Any]:
    """(``RunCost``, ``TrySavings``) of ``run`` at ``price`` per GPU-hour; ``(None, None)`` without
    a price or without steps; the savings only with a ``--try`` comparison that found the fix faster."""
    if price is None:
        return None, None
    from gpudoctor.analysis.cost import run_cost, try_savings
    from gpudoctor.analysis.facts import run_facts

    cost = run_cost(run_facts(run, current_thresholds()), findings or (), price)
    savings = try_savings(cost, verified) if cost is not None and verified is not None else None
    return cost, savings


def render_cost(run: Any, findings: list | None, console: Any, price: float | None, verified: Any = None) -> None:
    """Print the cost block (nothing without a price); a note when the run has no steps to price."""
    if price is None:
        return
    cost, savings = costs(run, findings, price, verified)
    if cost is None:
        console.print("cost: no steady-state step was recorded to price", highlight=False, markup=False)
        return
    from gpudoctor.report.cost_view import render_cost as view

    unverified = tuple(verified.knobs) if verified is not None and savings is None else ()
    console.print(view(cost, savings, unverified))


def payload(run: Any, findings: list | None, price: float | None = None, verified: Any = None) -> dict:
    """The ``--json`` form of a diagnosed run (with a ``cost`` key when a price is given)."""
    from gpudoctor.analysis.facts import run_facts
    from gpudoctor.analysis.run_stats import run_stats

    th = current_thresholds()
    facts = run_facts(run, th)
    out = {
        "run_dir": str(run.path),
        "manifest": run.manifest,
        "stats": run_stats(run, th),
        "breakdown": [{"rank": rf.rank, "gpu_busy_frac": rf.busy_frac, **_plain(rf.breakdown)}
                      for rf in facts.ranks],
        "findings": findings,
    }
    if price is not None:
        from gpudoctor.report.cost_view import cost_payload

        out["cost"] = cost_payload(*costs(run, findings, price, verified))
    return out


def _plain(breakdown: Any) -> dict:
    return dataclasses.asdict(breakdown)


def _merged(run_dirs: list[Path]) -> tuple[Any, list]:
    """The run directories of one job's nodes as one run, and its findings (not written)."""
    from gpudoctor.analysis.diagnose import diagnose
    from gpudoctor.analysis.run_merge import MergeError, merge_runs

    if len(set(p.resolve() for p in run_dirs)) < len(run_dirs):
        raise GpuDoctorUserError("the same run directory is given twice; give each node's once")
    try:
        run = merge_runs([load(d) for d in run_dirs])
    except MergeError as exc:
        raise GpuDoctorUserError(f"{exc}; give the run directories of one job's nodes") from None
    return run, list(diagnose(run))


def register(app: typer.Typer) -> None:
    @app.command()
    def diagnose(
        run_dirs: list[Path] = typer.Argument(
            ..., metavar="RUN_DIR", help="A run directory made by `gpudoctor run`; several: the "
            "run directories of one multi-node job's nodes, diagnosed as one run."),
        json_output: bool = typer.Option(False, "--json", help="Print JSON."),
        top: int = typer.Option(5, "--top", min=0, help="List the profiler window's N slowest GPU kernels and CPU ops (0: none)."),
        fail_on: FailOn = typer.Option(FailOn.WARN, "--fail-on", help=FAIL_ON_HELP),
        price: float = price_option(),
        thresholds: Path = thresholds_option(),
        save: bool = typer.Option(False, "--save", help="Also store the findings in RUN_DIR's "
                                  "findings.json (one RUN_DIR), for `gpudoctor report` and tools."),
    ) -> None:
        """Re-analyse a recorded run directory and print its findings.

        The analysis is pure, so a run recorded on a GPU machine can be diagnosed anywhere, without
        torch. Nothing is written into RUN_DIR unless --save is given. Several RUN_DIRs (one per node of a
        torchrun --nnodes job, each from that node's `gpudoctor run`) are merged into one run of
        all their ranks and diagnosed together; nothing is written into them then.

        Exit codes: 0 no finding at or above --fail-on; 1 findings at or above --fail-on (default
        warn); 2 usage or input error (no such directory, a damaged run); 130 interrupted.

        \b
        Examples:
          gpudoctor diagnose gpudoctor-runs/20261201-101500-train
          gpudoctor diagnose RUN_DIR --json > findings.json
          gpudoctor diagnose RUN_DIR --fail-on error   # CI: fail on errors only
          gpudoctor diagnose RUN_DIR --price-per-gpu-hour 2.5   # what it costs
          gpudoctor diagnose node0/run node1/run   # a 2-node job, a run each
          gpudoctor diagnose RUN_DIR --thresholds my-thresholds.toml
        """
        from gpudoctor.cli.output import emit_json, exit_code, stdout_console

        if len(run_dirs) == 1:
            run = load(run_dirs[0])
            findings = analyse(run, save=save)
        else:
            if save:
                raise GpuDoctorUserError("--save takes one RUN_DIR: several are merged into one "
                                         "run, which has no directory of its own")
            run, findings = _merged(run_dirs)
        if json_output:
            emit_json(payload(run, findings, price))
        else:
            render(run, findings, stdout_console(), top=top, price=price)
        raise typer.Exit(exit_code([f.severity.value for f in findings or ()], fail_on=fail_on))
