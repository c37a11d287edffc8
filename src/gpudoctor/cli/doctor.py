"""``gpudoctor doctor [-- CMD...]``: the whole check-up in one command.

check → run (the user's command, or an embedded example workload) → diagnose → try the top fix
→ terminal summary → HTML report. Each stage prints a line on stderr (``gpudoctor: [k/5] ...``)
and its progress under it (:mod:`gpudoctor.cli.progress`); results go to stdout.
"""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path
from typing import Any

import typer

from gpudoctor.cli.output import FAIL_ON_HELP, FailOn
from gpudoctor.cli.pricing import price_option
from gpudoctor.cli.thresholds_option import current_thresholds, thresholds_option
from gpudoctor.errors import GpuDoctorUserError

# as in run: doctor's options first, the first positional word starts the command
_CONTEXT = {"allow_extra_args": True, "allow_interspersed_args": False}
EMBEDDED = "basic_user"  # the seeds' "basic user" loop: data-loader bound on any machine
SIZES = ("auto", "tiny", "small", "medium")
STALL_TIMEOUT_S = 30.0  # run's --stall-timeout default
DOCTOR_MAX_RUNS = 3  # runs of each setting at most when proving the top fix (run --try: --repeats)


def _gpu_usable(facts: Any) -> bool:
    return any(d.context_ok and d.alloc_ok for d in facts.devices)


def _embedded_command(size: str, gpu: bool) -> tuple[str, ...]:
    import sys

    from gpudoctor.workloads import WORKLOADS

    workload = WORKLOADS[EMBEDDED]
    chosen = size if size != "auto" else ("small" if gpu else "tiny")
    return tuple(workload.argv(size=chosen, python=sys.executable))


def _run(spec: Any, progress: Any) -> Any:
    from gpudoctor.cli import diagnose as diag
    from gpudoctor.collectors.launch import run_instrumented

    outcome = run_instrumented(spec, say=progress.say, on_progress=progress.run)
    progress.stage("diagnosing")
    run = diag.load(outcome.run_dir)
    findings = diag.analyse(run, save=True) if run.steps else []
    return outcome, run, findings or []


def _prove(command: tuple[str, ...], base: Path, steps: int, steps_given: bool, knobs: str, first: Any,
           progress: Any, stall_timeout_s: float = STALL_TIMEOUT_S) -> Any:
    """The top fix, measured as ``run --try`` measures it: interleaved baseline and knobbed runs
    until the difference is above the run-to-run noise (the diagnosed run is the first baseline).
    Returns the runs (``TryRuns``: ``.comparison``, ``.exit_code``)."""
    from gpudoctor.cli.try_runs import measure, stall_for, steps_for
    from gpudoctor.collectors.knobs import parse_knobs

    parsed = parse_knobs(knobs)
    run_steps, why = steps_for(parsed, steps if steps_given else None, steps)
    if why:
        progress.say(f"gpudoctor: {why}")

    def run_one(spec: Any) -> tuple[Any, Any]:
        outcome, data, _ = _run(spec, progress)
        return outcome, data

    def make_spec(run_dir: Path, *, knobs: tuple, repeat: bool) -> Any:
        from gpudoctor.collectors.launch import RunSpec

        stall = stall_for(tuple(k.name for k in knobs), stall_timeout_s)  # as run --try: compile warms up
        return RunSpec(command=command, run_dir=run_dir, steps=run_steps, echo_child=False, knobs=knobs,
                       stall_timeout_s=stall, **({"profile": False, "sample_gpu": False} if repeat else {}))

    def on_run(arm: str, n: int) -> None:
        progress.label = f"[4/5] {arm} run {n} (at most {DOCTOR_MAX_RUNS} of each): "

    reuse = run_steps == steps  # the diagnosed run is the first baseline unless steps differ
    return measure(make_spec, base if reuse else base / "proof", parsed, max_runs=DOCTOR_MAX_RUNS,
                   run=run_one, on_run=on_run, first=first if reuse else None)


def register(app: typer.Typer) -> None:
    @app.command(context_settings=_CONTEXT, options_metavar="[OPTIONS] [[--] COMMAND [ARGS]...]")
    def doctor(
        ctx: typer.Context,
        steps: int = typer.Option(None, "--steps", help="Optimizer steps to measure per run (default 60; "
                                  "100 when the fix to prove is compile)."),
        out: Path = typer.Option(None, "--out", "-o", help="Where the run directories and report go: a new "
                                 "directory (default gpudoctor-runs/<time>-doctor-<name>)."),
        force: bool = typer.Option(False, "--force", help="Let --out replace an earlier gpudoctor run there."),
        try_fix: bool = typer.Option(True, "--try/--no-try",
                                     help="Re-run with the top finding's fix injected and measure the gain."),
        size: str = typer.Option("auto", "--size", help="Size of the embedded workload when no command "
                                 "is given: auto (small on a GPU, tiny on a CPU), tiny, small, medium."),
        timeout: float = typer.Option(60.0, "--timeout", help="Seconds the GPU probe of the check may take."),
        stall_timeout: float = typer.Option(
            STALL_TIMEOUT_S, "--stall-timeout", help="Seconds without an optimizer step (at least 20 x the "
            "median step) before the script is stopped as stalled, with every rank's stacks; raise "
            "it for long evals or checkpoints, as for run."),
        json_output: bool = typer.Option(False, "--json", help="Print JSON instead of the summary."),
        fail_on: FailOn = typer.Option(FailOn.WARN, "--fail-on", help=FAIL_ON_HELP),
        price: float = price_option(),
        thresholds: Path = thresholds_option(),
    ) -> None:
        """The full check-up: check the GPU stack, run a training script, prove the top fix.

        Checks the GPU stack, runs and diagnoses a training script, re-runs it with the top
        finding's fix to measure the gain, and writes an HTML report. With no command it runs an
        embedded example (the seeds' "basic user" CIFAR-style loop, about a minute on a GPU; it
        runs on a CPU too). Give your own command after doctor's options.

        Exit codes: 0 nothing to act on; 1 a finding at or above --fail-on (default warn), a
        failing check row on a GPU machine, or a script that failed; 2 usage or input error; 130
        interrupted (Ctrl-C).

        \b
        Examples:
          gpudoctor doctor
          gpudoctor doctor --no-try --size tiny
          gpudoctor doctor --steps 40 python train.py --lr 0.1
          gpudoctor doctor --stall-timeout 300 python train.py   # long evals
        """
        from gpudoctor.analysis.env_rules import check_env
        from gpudoctor.analysis.knob_map import first_testable
        from gpudoctor.cli import diagnose as diag
        from gpudoctor.cli.output import EXIT_INTERRUPTED, emit_json, exit_code, stderr_console, stdout_console
        from gpudoctor.collectors.env import gather_facts
        from gpudoctor.collectors.launch import default_run_dir, resolve_command
        from gpudoctor.records.base import write_json
        from gpudoctor.records.env import Verdict
        from gpudoctor.records.rundir import ENV, KIND_ENV
        from gpudoctor.report.check_view import check_table, verdict_line
        from gpudoctor.report.html import write_report

        steps_given = steps is not None
        steps = steps if steps is not None else 60
        if steps < 5:
            raise GpuDoctorUserError(f"--steps {steps}: use at least 5 so warm-up can be left out")
        if size not in SIZES:
            raise GpuDoctorUserError(f"--size {size!r} is not one of {', '.join(SIZES)}")
        if timeout <= 0:
            raise GpuDoctorUserError(f"--timeout must be a positive number of seconds, got {timeout}")
        if not stall_timeout > 0:  # nan too
            raise GpuDoctorUserError(
                f"--stall-timeout must be a positive number of seconds, got {stall_timeout}")
        if out is not None:  # before the minute of checks: a bad --out is refused at once
            from gpudoctor.collectors import outdir

            outdir.claim(out, force=force)
        from gpudoctor.cli.progress import Progress

        err, console = stderr_console(), stdout_console()
        say = (lambda message: err.print(message, highlight=False, markup=False))
        start = time.perf_counter()

        with Progress(err) as progress:
            progress.headline("[1/5] checking the GPU stack: driver, runtime, devices, context, compute")
            facts = gather_facts(timeout_s=timeout)
            check = check_env(facts)
        gpu = _gpu_usable(facts)
        if not json_output:
            console.print(verdict_line(check))
            problems = tuple(r for r in check.results if r.verdict in (Verdict.FAIL, Verdict.WARN))
            if problems:  # only what needs attention; `gpudoctor check` shows every row
                console.print(check_table(dataclasses.replace(check, results=problems)))

        command = tuple(ctx.args) or _embedded_command(size, gpu)
        resolve_command(command)
        base = out if out is not None else default_run_dir(("doctor",) + command)
        where = "the GPU" if gpu else "the CPU (no usable GPU: see the check above)"
        say(f"gpudoctor: [2/5] running {' '.join(command)} for {steps} steps on {where} "
            f"(its output goes to {base / 'baseline' / 'stdout.log'})")
        with Progress(err) as progress:
            from gpudoctor.collectors.launch import RunSpec

            spec = RunSpec(command=command, run_dir=base / "baseline", steps=steps, echo_child=False,
                           stall_timeout_s=stall_timeout)
            outcome, run, findings = _run(spec, progress)
        if outcome.exit_code == EXIT_INTERRUPTED:
            say(f"interrupted; what was recorded is in {run.path}")
            raise typer.Exit(EXIT_INTERRUPTED)
        write_json(run.path / ENV, check, kind=KIND_ENV)
        run.env = check

        comparison = None
        # the knobs come from the run's own records (its cores per rank, its loader), as the fix text
        config = run.configs[min(run.configs)] if run.configs else None
        pick = first_testable(findings, config) if try_fix else None
        if pick is not None and outcome.exit_code == 0:
            finding, knobs = pick
            say(f"gpudoctor: [3/5] diagnosed: {len(findings)} finding(s); the top one to prove: {finding.title}")
            say(f"gpudoctor: [4/5] proving the fix: the run again with --try {knobs}, interleaved with "
                "the baseline until the difference is above the noise")
            with Progress(err) as progress:
                proof = _prove(command, base, steps, steps_given, knobs, (outcome, run), progress,
                               stall_timeout)
            if proof.exit_code == EXIT_INTERRUPTED:
                say(f"interrupted while proving the fix; the runs so far are in {base}")
                raise typer.Exit(EXIT_INTERRUPTED)
            comparison = proof.comparison
        else:
            why = ("--no-try" if not try_fix else "the script failed" if outcome.exit_code != 0
                   else "no finding has a fix gpudoctor can inject")
            say(f"gpudoctor: [3/5] diagnosed: {len(findings)} finding(s); [4/5] no fix to prove ({why})")
        with Progress(err) as progress:
            progress.headline("[5/5] writing the HTML report")
            report = write_report(run, findings, verified=comparison, price_per_gpu_hour=price,
                                  thresholds=current_thresholds())
        seconds = time.perf_counter() - start

        if json_output:
            emit_json({
                "check": {"verdict": check.worst, "summary": check.summary, "results": check.results},
                "run": {**diag.payload(run, findings, price, comparison), "exit_code": outcome.exit_code},
                "try": comparison, "report": str(report), "seconds": round(seconds, 1),
            })
        else:
            diag.render(run, findings, console)
            if comparison is not None:
                from gpudoctor.report.try_view import render_try

                console.print(render_try(comparison))
            elif try_fix and findings:
                console.print("No finding has a fix gpudoctor can inject and measure; apply the fixes "
                              "above and run again.")
            diag.render_cost(run, findings, console, price, comparison)
            console.print(f"report: {report}", highlight=False, markup=False)
            console.print(f"doctor finished in {seconds:.0f} s. Next: open the report; "
                          "`gpudoctor run -- python your_train.py` diagnoses your own script.",
                          highlight=False, markup=False)
        # On a machine without a usable GPU the check's FAIL rows are expected (doctor runs on the CPU).
        severities = [f.severity.value for f in findings]
        if gpu:
            severities += [r.verdict.value for r in check.results]
        raise typer.Exit(exit_code(severities, fail_on=fail_on, failed=outcome.exit_code != 0))
