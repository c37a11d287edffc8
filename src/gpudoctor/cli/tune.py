"""``gpudoctor tune [batch|loader|precision|scaler|ddp|all]``: measured auto-tuning.

Parses, calls :func:`gpudoctor.tune.session.tune` (an engine target) or
:func:`gpudoctor.tune.script.tune_script` (a plain script), renders. Progress goes to stderr: the
budget plan, each stage's start and end, one line per finished setting; Ctrl-C stops the trials,
what finished is still printed, nothing is written (the confirmation did not run; exit 130).
"""

from __future__ import annotations

import typer

KNOB_CHOICES = ("batch", "loader", "precision", "scaler", "ddp", "all")


def register(app: typer.Typer) -> None:
    @app.command()
    def tune(
        knob: str = typer.Argument("all", help="batch, loader, precision, scaler, ddp or all."),
        target: str = typer.Option(
            None, "--target", help="The engine job to tune: module:function or file.py:function returning a TuneTarget."
        ),
        script: str = typer.Option(
            None, "--script", help="Or a plain script command (quoted), tuned through `run --try` knobs."
        ),
        out: str = typer.Option(
            "gpudoctor-tuned.toml", "--out", "-o", help="Engine config to write (TrainConfig.from_file); loader settings go "
            "next to it as NAME.loader.toml."
        ),
        json_output: bool = typer.Option(False, "--json", help="Print every trial and the result as JSON."),
        max_batch: int = typer.Option(None, "--max-batch", help="Never try a per-device batch above this."),
        margin: float = typer.Option(0.05, "--margin", help="Safety margin below the largest batch that fit."),
        budget_s: float = typer.Option(
            510.0, "--budget-s", help="Time budget of the whole session, planned per stage from the measured step "
            "time (0: no limit)."
        ),
        steps: int = typer.Option(10, "--steps", help="The fewest measured steps per trial (after the warm-up; more "
                                  "when a step is short)."),
        repeats: int = typer.Option(2, "--repeats", help="Runs of each setting, interleaved (the spread is shown)."),
        window_s: float = typer.Option(
            None, "--window-s", help="The least time a trial's measured steps last (default 1 s; 3 s for --script)."
        ),
        isolation: str = typer.Option(
            "auto", "--isolation", help="auto, inline or process (every trial in a fresh process)."
        ),
        no_compile: bool = typer.Option(False, "--no-compile", help="Leave out the torch.compile trial."),
        pick_batch: str = typer.Option(
            "knee", "--pick-batch", help="knee: write the batch where throughput flattens; max: the largest safe one."
        ),
    ) -> None:
        """Tune batch size, DataLoader, precision, GradScaler and DDP by measuring real steps.

        Every trial runs past warm-up and is repeated; a setting wins only above the run-to-run
        noise, and a confirmation run of the tuned configuration against the starting one decides
        whether anything is written (never a slower configuration); when the whole loses, the
        longest part of it that wins its own confirmation is written, with time left in the budget.
        --budget-s sets the time.

        Exit codes: 0 tuned (or the starting configuration kept, with the reason); 1 every
        trial failed (the first error is printed); 2 usage or input error; 130 interrupted
        (nothing written).

        \b
        Examples:
          gpudoctor tune all --target train.py:make_target --budget-s 510
          gpudoctor tune loader --target mymodels:target --out tuned.toml
          gpudoctor tune all --script "python train.py --epochs 1"
        """
        import contextlib
        import sys

        from gpudoctor.cli.output import EXIT_FINDINGS, EXIT_INTERRUPTED, emit_json, stderr_console, stdout_console
        from gpudoctor.errors import GpuDoctorUserError

        if knob not in KNOB_CHOICES:
            raise GpuDoctorUserError(f"unknown knob {knob!r}; choose one of {', '.join(KNOB_CHOICES)}")
        if (target is None) == (script is None):
            raise GpuDoctorUserError("give exactly one of --target module:function or --script 'python train.py'")
        if isolation not in ("auto", "inline", "process"):
            raise GpuDoctorUserError(f"--isolation {isolation!r}: use auto, inline or process")
        from gpudoctor.core.dist import dist_env

        main_rank = dist_env().rank == 0
        err = stderr_console()
        from gpudoctor.report.tune_view import render_tune, trial_line

        # A live spinner on a terminal (the knob and the trials done so far); every finished trial
        # also gets a line, so a log file keeps the whole story.
        live = err.status("starting (importing the target, measuring the reference run) ...") if main_rank and err.is_terminal else contextlib.nullcontext()
        done = {"runs": 0, "knob": "plan"}

        def spin() -> None:
            if hasattr(live, "update"):
                live.update(f"tuning {done['knob']}: {done['runs']} trial{'s' if done['runs'] != 1 else ''} done")

        def on_run() -> None:  # every run, repeats included
            done["runs"] += 1
            if main_rank:
                spin()

        def on_trial(trial) -> None:  # one line per setting (its runs together)
            if main_rank:
                err.print(trial_line(trial), highlight=False, markup=False, style="dim")

        def on_knob(name: str) -> None:
            done["knob"] = name
            if main_rank:
                spin()

        def on_say(message: str) -> None:
            if main_rank:
                err.print(message, highlight=False, markup=False, style="bold" if message.startswith("tuning") else None)

        if main_rank and not err.is_terminal:  # a log: say what the first, silent seconds do
            err.print("gpudoctor: tune: starting (importing the target, measuring the reference run)",
                      highlight=False, markup=False)
        try:
            with live:
                result = _run(knob, target, script, out, options_kwargs=dict(
                    max_batch=max_batch, margin=margin, budget_s=budget_s or None, steps=steps, isolation=isolation,
                    compile=not no_compile, batch_pick=pick_batch, repeats=repeats,
                    **({} if window_s is None else {"window_s": window_s})),
                    callbacks=dict(on_trial=on_trial, on_knob=on_knob, on_say=on_say, on_run=on_run))
        except KeyboardInterrupt:
            err.print("interrupted before any trial finished", style="yellow")
            raise typer.Exit(EXIT_INTERRUPTED) from None
        if main_rank:
            if json_output:
                emit_json(result)
            else:
                # the terminal's width, or COLUMNS (80 when piped): tables too wide for it are stacked
                stdout_console().print(render_tune(result))
            sys.stdout.flush()
        if result.interrupted:
            raise typer.Exit(EXIT_INTERRUPTED)
        crashed = _every_trial_failed(result)
        if crashed is not None:
            if main_rank:
                err.print(f"error: every trial failed, so nothing was tuned; the first: {crashed}",
                          highlight=False, markup=False)
            raise typer.Exit(EXIT_FINDINGS)


def _every_trial_failed(result) -> str | None:
    """The first failure's reason when trials ran and every one failed (a script that does not
    start, a target that raises), else ``None``: such a run tuned nothing and must not exit 0."""
    from gpudoctor.records.tune import TrialVerdict

    trials = [t for k in result.knobs for t in k.trials if t.verdict is not TrialVerdict.SKIPPED]
    if not trials or any(t.verdict is not TrialVerdict.FAILED for t in trials):
        return None
    return trials[0].reason or "no reason was recorded"


def _run(knob: str, target: str | None, script: str | None, out: str, *, options_kwargs: dict, callbacks: dict):
    """Call the library: a plain script through ``run --try`` knobs, or an engine target."""
    import shlex

    from gpudoctor.errors import GpuDoctorUserError

    if script is not None:
        from gpudoctor.tune.script import tune_script

        try:
            command = tuple(shlex.split(script))
        except ValueError as exc:  # an unclosed quote
            raise GpuDoctorUserError(f"--script {script!r} cannot be split into a command ({exc}); "
                                     "quote it as in a shell, e.g. --script 'python train.py --lr 3e-4'") from None
        if not command:
            raise GpuDoctorUserError("--script is empty; e.g. --script 'python train.py'")
        return tune_script([knob], command, budget_s=options_kwargs["budget_s"], repeats=options_kwargs["repeats"],
                           min_steps=options_kwargs["steps"], compile_trial=options_kwargs["compile"],
                           **({"window_s": options_kwargs["window_s"]} if "window_s" in options_kwargs else {}),
                           **callbacks)
    from gpudoctor.tune.session import TuneOptions, tune

    try:
        options = TuneOptions(**options_kwargs)
    except ValueError as exc:
        raise GpuDoctorUserError(str(exc)) from None
    return tune([knob], target_ref=target, options=options, out=out, **callbacks)
