"""``gpudoctor run [OPTIONS] -- CMD...``: run an unmodified training script under the probes.

Parses, calls :func:`gpudoctor.collectors.launch.run_instrumented`, diagnoses the run directory
and renders. Exit code, first that applies: 2 a usage error; 130 interrupted; the script's own
when it failed (128+N when killed by signal N); 1 when it made no optimizer step (or not before
the first-step timeout) or stalled; 1 when a finding is at or above ``--fail-on`` (default warn);
else 0.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer

from gpudoctor.cli.output import FAIL_ON_HELP, FailOn
from gpudoctor.errors import GpuDoctorUserError

# gpudoctor's options come first; the first word that is not an option starts the command, and
# everything from there on is the command's (so `run python train.py --steps 7` passes --steps 7
# to the script); `--` before the command also works; an unknown option before it is an error.
_CONTEXT = {"allow_extra_args": True, "allow_interspersed_args": False}
USAGE = "[OPTIONS] [--] COMMAND [ARGS]..."


def _spec(command: tuple[str, ...], run_dir: Path, **kwargs: Any):
    from gpudoctor.collectors.launch import RunSpec

    try:
        return RunSpec(command=command, run_dir=run_dir, **kwargs)
    except ValueError as exc:
        raise GpuDoctorUserError(str(exc)) from None


def parse_window(text: str) -> tuple[int, int]:
    """``"20:24"`` -> ``(20, 24)``; a :class:`GpuDoctorUserError` saying the form otherwise."""
    first, sep, last = text.partition(":")
    try:
        if not sep:
            raise ValueError
        return int(first), int(last)
    except ValueError:
        raise GpuDoctorUserError(
            f"--window {text!r}: give FIRST:LAST optimizer steps (from 0), e.g. --window 20:24"
        ) from None


def _one(spec: Any, json_output: bool) -> tuple[Any, Any, list | None]:
    from gpudoctor.cli import diagnose as diag
    from gpudoctor.cli.output import stderr_console
    from gpudoctor.collectors.launch import run_instrumented

    outcome = run_instrumented(spec)
    if outcome.message:
        stderr_console().print(f"gpudoctor: {outcome.message}", highlight=False, markup=False)
    run = diag.load(outcome.run_dir)
    # A run stopped before its first step still has a diagnosis when it left stacks behind.
    findings = diag.analyse(run) if run.steps or run.stacks else None
    return outcome, run, findings


def severities(findings: list | None) -> list[str]:
    """The findings' severities, for :func:`gpudoctor.cli.output.exit_code`."""
    return [f.severity.value for f in findings or ()]


_EXPLAIN_TAIL = 300  # lines of stdout.log read for a crash's explanation


def crash_explanation(run: Any) -> Any:
    """A crashed run's best ``gpudoctor explain`` match on the end of its output, or ``None``."""
    if run.manifest.status != "crashed":
        return None
    from gpudoctor.explain import explain_text
    from gpudoctor.records.rundir import STDOUT

    try:
        lines = (run.path / STDOUT).read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError:
        lines = run.manifest.error.splitlines()
    report = explain_text("\n".join(lines[-_EXPLAIN_TAIL:]))
    return (report.roots or report.matches or (None,))[0]


def render_crash_explanation(run: Any, match: Any, console: Any) -> None:
    """Under the findings: the explain entry of a crash, or the command that looks for one."""
    if run.manifest.status != "crashed":
        return
    where = run.path / "stdout.log"
    if match is None:
        console.print(f"no known failure matched the error; the statements found: gpudoctor explain {where}",
                      highlight=False, markup=False)
        return
    from gpudoctor.report.explain_view import match_block

    console.print(f"the crash, explained (gpudoctor explain {where}):", highlight=False, markup=False)
    console.print(match_block(1, match))


def register(app: typer.Typer) -> None:
    @app.command(context_settings=_CONTEXT, options_metavar=USAGE)
    def run(
        ctx: typer.Context,
        steps: int = typer.Option(None, "--steps", help="Stop after N optimizer steps (default 60)."),
        full: bool = typer.Option(False, "--full", help="Let the script run to its end."),
        out: Path = typer.Option(
            None, "--out", help="Run directory: a new one (default gpudoctor-runs/<time>-<name>)."
        ),
        force: bool = typer.Option(False, "--force", help="Let --out replace an earlier gpudoctor run there."),
        try_knobs: str = typer.Option(
            None, "--try", help="Re-run with knobs, e.g. num_workers=8,pin_memory; prints before/after."
        ),
        json_output: bool = typer.Option(False, "--json", help="Print JSON."),
        no_profile: bool = typer.Option(False, "--no-profile", help="Skip the short profiler window."),
        window: str = typer.Option(
            None, "--window", help="Profile steps FIRST:LAST (default: the last 5 of --steps; 10:14 with --full)."
        ),
        keep_trace: bool = typer.Option(False, "--keep-trace", help="Also keep the window's Chrome trace."),
        first_step_timeout: float = typer.Option(
            120.0, "--first-step-timeout",
            help="Stop the script, with every rank's stacks, if no optimizer step happens by then (s).",
        ),
        stall_timeout: float = typer.Option(
            30.0, "--stall-timeout",
            help="A stall: no optimizer step for max(S, 20 x the median step); stop it with every rank's stacks.",
        ),
        fail_on: FailOn = typer.Option(FailOn.WARN, "--fail-on", help=FAIL_ON_HELP),
    ) -> None:
        """Run a training command under instrumentation and diagnose it.

        gpudoctor's options come first; the first word that is not one starts the command
        (python train.py, python -m pkg.train, torchrun ...), and every word after it is the
        command's. The script runs unmodified; gpudoctor stops it after --steps optimizer steps and
        prints the findings.

        Exit codes, the first that applies: 2 usage error; 130 interrupted; the script's own
        non-zero exit code (128+N when killed by signal N); 1 no optimizer step, a stall, or a
        finding at or above --fail-on (default warn); else 0.

        \b
        Examples:
          gpudoctor run python train.py --lr 0.1
          gpudoctor run --steps 100 --fail-on error python -m mypkg.train
          gpudoctor run torchrun --standalone --nproc_per_node 2 train.py
          gpudoctor run --try num_workers=8,pin_memory -- python train.py
        """
        from gpudoctor.cli import diagnose as diag
        from gpudoctor.cli.output import emit_json, exit_code, stdout_console
        from gpudoctor.collectors import outdir
        from gpudoctor.collectors.launch import DEFAULT_STEPS, default_run_dir, resolve_command
        from gpudoctor.collectors.knobs import parse_knobs

        command = tuple(ctx.args)
        if not command:
            raise GpuDoctorUserError("no command given; write it after gpudoctor's options, e.g. "
                                     "gpudoctor run --steps 60 python train.py --lr 0.1")
        if full and steps is not None:
            raise GpuDoctorUserError("--steps and --full contradict each other; give one of them")
        if no_profile and window is not None:
            raise GpuDoctorUserError("--window and --no-profile contradict each other; give one of them")
        resolve_command(command)
        knobs = parse_knobs(try_knobs) if try_knobs is not None else ()
        base = out if out is not None else default_run_dir(command)
        options = {
            "steps": None if full else (steps if steps is not None else DEFAULT_STEPS),
            "profile": not no_profile,
            "profile_window": parse_window(window) if window is not None else None,
            "first_step_timeout_s": first_step_timeout,
            "stall_timeout_s": stall_timeout,
            "keep_trace": keep_trace,
            "child_stdout_to_stderr": json_output,
        }
        _spec(command, base, **options)  # bad options: refused before --force removes anything
        outdir.claim(base, force=force)
        console = stdout_console()
        if not knobs:
            outcome, rundata, findings = _one(_spec(command, base, **options), json_output)
            explained = crash_explanation(rundata)
            if json_output:
                extra = {"explain": explained} if rundata.manifest.status == "crashed" else {}
                emit_json({**diag.payload(rundata, findings), **extra, "exit_code": outcome.exit_code})
            else:
                diag.render(rundata, findings, console)
                render_crash_explanation(rundata, explained, console)
                console.print(f"run directory: {outcome.run_dir}", highlight=False, markup=False)
            raise typer.Exit(exit_code(severities(findings), fail_on=fail_on, passthrough=outcome.exit_code))

        from gpudoctor.report.try_view import compare, render_try

        before = _one(_spec(command, base / "baseline", **options), json_output)
        if before[0].exit_code != 0 or not before[1].steps:
            if json_output:
                emit_json({"baseline": diag.payload(before[1], before[2]), "try": None,
                           "comparison": None, "exit_code": before[0].exit_code or 1})
            else:
                diag.render(before[1], before[2], console)
            from gpudoctor.cli.output import stderr_console

            stderr_console().print(
                f"gpudoctor: the baseline run did not train ({before[0].manifest.status}); "
                "fix that before --try", highlight=False, markup=False)
            raise typer.Exit(before[0].exit_code or 1)
        after = _one(_spec(command, base / "try", knobs=knobs, **options), json_output)
        comparison = compare(before[1], after[1])
        if json_output:
            emit_json(
                {
                    "baseline": diag.payload(before[1], before[2]),
                    "try": diag.payload(after[1], after[2]),
                    "comparison": comparison,
                    "exit_code": after[0].exit_code,
                }
            )
        else:
            diag.render(before[1], before[2], console)
            console.print(render_try(comparison))
            console.print(f"run directories: {before[0].run_dir} (baseline), {after[0].run_dir} (--try)",
                          highlight=False, markup=False)
        raise typer.Exit(exit_code(severities(after[2]), fail_on=fail_on, passthrough=after[0].exit_code))
