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
from gpudoctor.cli.pricing import price_option
from gpudoctor.cli.thresholds_option import thresholds_option
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


def _one(spec: Any) -> tuple[Any, Any, list | None]:
    """Run ``spec`` with its progress on stderr (the script's output above it), then diagnose."""
    from gpudoctor.cli import diagnose as diag
    from gpudoctor.cli.progress import Progress
    from gpudoctor.collectors.launch import run_instrumented

    with Progress() as progress:
        outcome = run_instrumented(spec, say=progress.say, echo=progress.echo, on_progress=progress.run)
        if outcome.message:
            progress.say(f"gpudoctor: {outcome.message}")
        progress.stage("diagnosing")
        run = diag.load(outcome.run_dir)
        # A run stopped before its first step still has a diagnosis when it left stacks behind.
        findings = diag.analyse(run, save=True) if run.steps or run.stacks else None
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
    from gpudoctor.report.fit import print_whole

    console.print(f"the crash, explained (gpudoctor explain {where}):", highlight=False, markup=False)
    print_whole(console, match_block(1, match))  # its fix and links unwrapped: they copy whole


def register(app: typer.Typer) -> None:
    @app.command(context_settings=_CONTEXT, options_metavar=USAGE)
    def run(
        ctx: typer.Context,
        steps: int = typer.Option(None, "--steps", help="Stop after N optimizer steps (default 60)."),
        full: bool = typer.Option(False, "--full", help="Let the script run to its end."),
        out: Path = typer.Option(
            None, "--out", "-o", help="Run directory: a new one (default gpudoctor-runs/<time>-<name>)."
        ),
        force: bool = typer.Option(False, "--force", help="Let --out replace an earlier gpudoctor run there."),
        try_knobs: str = typer.Option(
            None, "--try", help="Re-run with knobs injected (num_workers=N, pin_memory, persistent_workers, "
            "prefetch_factor=N, non_blocking, tf32, cudnn_benchmark, expandable_segments, bf16, fp16, "
            "channels_last, compile), e.g. --try bf16,channels_last; prints before/after with the noise."
        ),
        repeats: int = typer.Option(
            4, "--repeats", help="With --try: at most N runs of each setting, interleaved, until the "
            "difference is above the run-to-run noise (at least 2 of each)."),
        json_output: bool = typer.Option(False, "--json", help="Print JSON."),
        no_profile: bool = typer.Option(False, "--no-profile", help="Skip the short profiler window."),
        window: str = typer.Option(
            None, "--window", help="Profile steps FIRST:LAST (default: the last 5 of --steps; 10:14 with --full)."
        ),
        keep_trace: bool = typer.Option(False, "--keep-trace", help="Also keep the window's Chrome trace."),
        trace_dir: Path = typer.Option(
            None, "--trace-dir", help="Also write the window's trace to DIR as TensorBoard's profiler "
            "writes it (one *.pt.trace.json.gz per rank; TensorBoard, Perfetto, Holistic Trace Analysis)."),
        nvtx: bool = typer.Option(False, "--nvtx", help="NVTX ranges around each step, optimizer step "
                                  "and data wait, for Nsight Systems (CUDA only)."),
        scalars: Path = typer.Option(
            None, "--scalars", help="Write step time, throughput, loss, memory and GPU use per step to "
            "DIR/scalars-rank{N}.csv (and TensorBoard event files when tensorboard is installed)."),
        first_step_timeout: float = typer.Option(
            120.0, "--first-step-timeout",
            help="Stop the script, with every rank's stacks, if no optimizer step happens by then (s).",
        ),
        stall_timeout: float = typer.Option(
            30.0, "--stall-timeout",
            help="A stall: no optimizer step for max(S, 20 x the median step); stop it with every rank's stacks.",
        ),
        compile_timeout: float = typer.Option(
            900.0, "--compile-timeout",  # collectors.supervise.COMPILE_TIMEOUT_S
            help="Compile time (torch.compile) counts against neither timeout above; stop the script, with "
            "every rank's stacks, once it has compiled this long without an optimizer step (s).",
        ),
        top: int = typer.Option(
            5, "--top", min=0, help="List the profiler window's N slowest GPU kernels and CPU ops (0: none).",
        ),
        fail_on: FailOn = typer.Option(FailOn.WARN, "--fail-on", help=FAIL_ON_HELP),
        price: float = price_option(),
        thresholds: Path = thresholds_option(),
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
          gpudoctor run --price-per-gpu-hour 2.5 python train.py   # what it costs
          gpudoctor run --trace-dir tb --scalars tb python train.py  # TensorBoard
          gpudoctor run --thresholds my-thresholds.toml python train.py
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
        if knobs and (trace_dir is not None or scalars is not None):
            raise GpuDoctorUserError("--trace-dir and --scalars record one run; run them without --try")
        if scalars is not None:
            _check_scalars_dir(scalars)
        if repeats < 2:
            raise GpuDoctorUserError(f"--repeats {repeats}: use at least 2 (one run of each has no spread)")
        base = out if out is not None else default_run_dir(command)
        options = {
            "steps": None if full else (steps if steps is not None else DEFAULT_STEPS),
            "profile": not no_profile,
            "profile_window": parse_window(window) if window is not None else None,
            "first_step_timeout_s": first_step_timeout,
            "stall_timeout_s": stall_timeout,
            "compile_timeout_s": compile_timeout,
            "keep_trace": keep_trace,
            "trace_dir": trace_dir,
            "nvtx": nvtx,
        }
        _spec(command, base, **options)  # bad options: refused before --force removes anything
        outdir.claim(base, force=force)
        console = stdout_console()
        if not knobs:
            outcome, rundata, findings = _one(_spec(command, base, **options))
            explained = crash_explanation(rundata)
            exported = _exports(rundata, trace_dir, scalars)
            if json_output:
                extra = {"explain": explained} if rundata.manifest.status == "crashed" else {}
                emit_json({**diag.payload(rundata, findings, price), **extra, **exported,
                           "exit_code": outcome.exit_code})
            else:
                diag.render(rundata, findings, console, top=top, price=price)
                render_crash_explanation(rundata, explained, console)
                console.print(f"run directory: {outcome.run_dir}", highlight=False, markup=False)
                for key, paths in exported.items():
                    if key != "notes":
                        console.print(f"{key}: {', '.join(paths) or 'none written'}", highlight=False, markup=False)
                for note in exported.get("notes", []):
                    console.print(f"note: {note}", highlight=False, markup=False)
            raise typer.Exit(exit_code(severities(findings), fail_on=fail_on, passthrough=outcome.exit_code))

        _try(command, base, knobs, options, steps_given=steps, full=full, max_runs=repeats,
             json_output=json_output, fail_on=fail_on, top=top, price=price)


def _check_scalars_dir(folder: Path) -> None:
    if folder.exists() and not folder.is_dir():
        raise GpuDoctorUserError(f"--scalars {folder}: that is a file; give a folder")
    if folder.is_dir() and any(folder.glob("scalars-rank*.csv")):
        raise GpuDoctorUserError(f"--scalars {folder}: it already holds step scalars; give a new folder "
                                 "(gpudoctor does not overwrite them)")


def _exports(run: Any, trace_dir: Path | None, scalars: Path | None) -> dict[str, list[str]]:
    """``--trace-dir``/``--scalars``: the files written (``traces``, ``scalars``) and ``notes``."""
    out: dict[str, list[str]] = {}
    notes: list[str] = []
    if trace_dir is not None:
        from gpudoctor.collectors.trace_export import TRACE_SUFFIX

        out["traces"] = sorted(str(p) for p in trace_dir.glob(f"*{TRACE_SUFFIX}")) if trace_dir.is_dir() else []
        notes += [f"rank {r}: {w.note}" for r, w in sorted(run.windows.items()) if "trace" in w.note]
    if scalars is not None and run.steps:
        from gpudoctor.core.scalars import export_run

        paths, note = export_run(run, scalars)
        out["scalars"] = [str(p) for p in paths]
        notes += [note] if note else []
    if notes:
        out["notes"] = notes
    return out


def _try(command: tuple[str, ...], base: Path, knobs: tuple, options: dict, *, steps_given: int | None,
         full: bool, max_runs: int, json_output: bool, fail_on: FailOn = FailOn.WARN,
         top: int = 5, price: float | None = None) -> None:
    """``--try``: interleaved baseline and knobbed runs until the difference is above the noise."""
    import dataclasses

    from gpudoctor.cli import diagnose as diag
    from gpudoctor.cli.output import emit_json, exit_code, stderr_console, stdout_console
    from gpudoctor.cli.try_runs import measure, stall_for, steps_for
    from gpudoctor.collectors.launch import DEFAULT_STEPS
    from gpudoctor.report.try_view import render_try

    console, err = stdout_console(), stderr_console()
    say = (lambda message: err.print(f"gpudoctor: {message}", highlight=False, markup=False))
    if not full:
        options["steps"], why = steps_for(knobs, steps_given, DEFAULT_STEPS)
        if why:
            say(why)
    findings: dict[str, Any] = {}

    def run_one(spec: Any) -> tuple[Any, Any]:
        outcome, data, found = _one(spec)
        findings[str(spec.run_dir)] = found
        return outcome, data

    def make_spec(run_dir: Path, *, knobs: tuple, repeat: bool) -> Any:
        extra = {"profile": False, "profile_window": None, "sample_gpu": False} if repeat else {}
        stall = stall_for(tuple(k.name for k in knobs), options["stall_timeout_s"])
        return _spec(command, run_dir, **{**options, **extra, "stall_timeout_s": stall}, knobs=knobs)

    result = measure(make_spec, base, knobs, max_runs=max_runs, run=run_one,
                     on_run=lambda arm, n: say(f"--try: {arm} run {n} (at most {max_runs} of each)"))
    (b_out, b_run), *_ = result.baseline
    if b_out.exit_code != 0 or not b_run.steps or not result.tried:
        if json_output:
            emit_json({"baseline": diag.payload(b_run, findings[str(b_run.path)], price), "try": None,
                       "comparison": None, "exit_code": b_out.exit_code or 1})
        else:
            diag.render(b_run, findings[str(b_run.path)], console, top=top, price=price)
        say(f"the baseline run did not train ({b_out.manifest.status}); fix that before --try")
        raise typer.Exit(b_out.exit_code or 1)
    t_out, t_run = result.tried[0]
    comparison = result.comparison
    if json_output:
        emit_json({
            "baseline": diag.payload(b_run, findings[str(b_run.path)], price, comparison),
            "try": diag.payload(t_run, findings[str(t_run.path)]),
            "comparison": dataclasses.asdict(comparison) if comparison is not None else None,
            "exit_code": result.exit_code,
        })
    else:
        diag.render(b_run, findings[str(b_run.path)], console, top=top)
        if comparison is not None:
            console.print(render_try(comparison))
        diag.render_cost(b_run, findings[str(b_run.path)], console, price, comparison)
        for outcome, data in result.baseline + result.tried:
            if outcome.exit_code != 0:
                say(f"the run in {data.path} ended {outcome.manifest.status}; see its stdout.log")
        dirs = ", ".join(f"{path} ({arm})" for arm, path in (comparison.run_dirs if comparison else ()))
        console.print(f"run directories: {dirs or base}", highlight=False, markup=False)
    raise typer.Exit(exit_code(severities(findings[str(t_run.path)]), fail_on=fail_on,
                               passthrough=result.exit_code))
