"""``gpudoctor fix [--diff | --write] [--no-measure] SCRIPT [-- ARGS]``: the run's findings as source
changes to the user's script, each kept only when it measured faster.

1. runs ``python SCRIPT ARGS`` under the probes exactly as ``gpudoctor run`` does (its
   :func:`~gpudoctor.cli.run._one`), into ``OUT/baseline``; lints the script;
2. plans the changes (:mod:`gpudoctor.fix.plan`) where the code was located, text advice elsewhere;
3. unless ``--no-measure``: each change on its own, in a patched copy under ``OUT/fix-N-KIND/``
   (never the user's file), against the baseline, interleaved and repeated as ``run --try`` does
   (:func:`gpudoctor.cli.try_runs.measure`); a change that did not measure faster is dropped; with
   more than one kept, the combined patch is measured the same way for the table;
4. prints the diff, the verdicts, the before/after table and the first steps' loss; ``--write``
   replaces the script atomically after keeping a backup (``SCRIPT.orig``, else ``SCRIPT.orig.N``).

Exit codes: 2 usage; 1 the script does not parse, the baseline did not train, or findings with a
code fix got only text advice (nothing could be located safely); else 0.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import typer

from gpudoctor.errors import GpuDoctorUserError

_CONTEXT = {"allow_extra_args": True, "allow_interspersed_args": False}
PATCHED = ("patched",)  # the marker ``measure`` passes for the patched arm


def _split(words: list[str]) -> tuple[Path, tuple[str, ...]]:
    words = [w for i, w in enumerate(words) if not (i == 0 and w == "--")]
    if not words:
        raise GpuDoctorUserError("no script given, e.g. gpudoctor fix train.py -- --lr 0.1")
    script, rest = Path(words[0]), words[1:]
    if rest and rest[0] == "--":
        rest = rest[1:]
    if script.suffix != ".py" or not script.is_file():
        raise GpuDoctorUserError(f"{script}: not a Python file; give the training script, e.g. gpudoctor fix train.py")
    return script, tuple(rest)


def backup_path(script: Path) -> Path:
    """``SCRIPT.orig``, or ``SCRIPT.orig.N`` with the first free N from 2."""
    path, n = script.with_name(script.name + ".orig"), 2
    while path.exists():
        path, n = script.with_name(f"{script.name}.orig.{n}"), n + 1
    return path


def write_fixed(script: Path, original: str, fixed: str) -> Path:
    """Keep a backup of ``original`` (exclusive create: never over a file), then replace ``script``."""
    from gpudoctor.records.atomic import write_bytes_atomic

    if script.read_bytes().decode("utf-8") != original:
        raise GpuDoctorUserError(f"{script} changed while gpudoctor fix ran; nothing written, run it again")
    backup = backup_path(script)
    with open(backup, "x", encoding="utf-8") as handle:
        handle.write(original)
    write_bytes_atomic(script, fixed.encode("utf-8"), mode=script.stat().st_mode & 0o7777)  # keeps +x
    return backup


def register(app: typer.Typer) -> None:
    @app.command(context_settings=_CONTEXT, options_metavar="[OPTIONS] SCRIPT [-- ARGS]...")
    def fix(
        ctx: typer.Context,
        write: bool = typer.Option(False, "--write", help="Apply the kept changes to SCRIPT (backup SCRIPT.orig)."),
        diff: bool = typer.Option(False, "--diff", help="Only print the diff and the table (the default)."),
        no_measure: bool = typer.Option(False, "--no-measure",
                                        help="Do not measure the patched script; keep every located change."),
        steps: int = typer.Option(None, "--steps",
                                  help="Optimizer steps per run (default 60; compile is measured over 100)."),
        repeats: int = typer.Option(4, "--repeats", help="At most N runs of each arm per change (at least 2)."),
        out: Path = typer.Option(None, "--out", help="Run directory (default gpudoctor-runs/<time>-<name>)."),
        no_profile: bool = typer.Option(False, "--no-profile", help="Skip the profiler window (no GPU busy, MFU)."),
        json_output: bool = typer.Option(False, "--json", help="Print JSON (the script's output goes to stderr)."),
    ) -> None:
        """Turn a run's findings into a measured patch of the training script.

        Runs SCRIPT under the probes as gpudoctor run does, turns the findings (data loader,
        pinned copies, fp32 compute, channels_last, cudnn.benchmark, a host sync per step,
        launch-bound, set_epoch, workers restarted every epoch) into small commented libcst
        edits where it located the code, measures each edit on its own against the original
        (interleaved runs, repeated until the difference is above the noise) and keeps only
        those that measured faster. Prints
        the unified diff and a before/after table; --write applies it, keeping a backup.
        A loader setting the script reads from its own flag (num_workers=args.workers) gets
        that flag's default changed, so the flag keeps working; when ARGS set the flag, the
        patched copy is measured with the new value there and the command line to run is shown.
        A script it cannot parse or locate gets the prescription as text (exit 1).

        \b
        Examples:
          gpudoctor fix train.py                # diff and table; writes nothing
          gpudoctor fix --write train.py -- --lr 0.1    # apply; train.py.orig kept
          gpudoctor fix --no-measure train.py   # every located change, unmeasured
          gpudoctor fix --steps 200 train.py    # longer runs
        """
        if write and diff:
            raise GpuDoctorUserError("--diff and --write contradict each other; give one of them")
        if repeats < 2:
            raise GpuDoctorUserError(f"--repeats {repeats}: use at least 2 (one run of each has no spread)")
        script, args = _split(list(ctx.args))
        from gpudoctor.cli.fix_flow import fix_script

        code = fix_script(script, args, write=write, measure=not no_measure, steps=steps, repeats=repeats,
                          out=out, profile=not no_profile, json_output=json_output)
        raise typer.Exit(code)


def run_spec(command: tuple[str, ...], run_dir: Path, steps: int, profile: bool, repeat: bool,
             kinds: tuple[str, ...] = ()) -> Any:
    """A ``run`` spec; repeats (and ``--no-profile``) run the probes alone, as ``--try``'s repeats;
    a copy patched with ``kinds`` that compile gets the stall limit of ``run --try compile``."""
    from gpudoctor.cli.run import _spec
    from gpudoctor.cli.try_runs import stall_for
    from gpudoctor.collectors.launch import STALL_TIMEOUT_S

    extra = {"profile": False, "profile_window": None, "sample_gpu": False} if repeat or not profile else {}
    return _spec(command, run_dir, **{"steps": steps, "profile": profile, **extra,
                                      "stall_timeout_s": stall_for(kinds, STALL_TIMEOUT_S)})


def patched_command(command: tuple[str, ...], patched: Path, argv: tuple[str, ...] | None = None) -> tuple[str, ...]:
    """The patched copy's command: ``argv`` (the script's arguments with the values of the options
    whose defaults the patch sets, :func:`gpudoctor.fix.options.command_line`), else the same."""
    return (command[0], str(patched), *(command[2:] if argv is None else argv))


def script_dir_on_path(script: Path) -> dict[str, str | None]:
    """Put the script's folder first on PYTHONPATH (a patched copy elsewhere still imports its
    neighbours); returns the old value to restore."""
    old = os.environ.get("PYTHONPATH")
    folder = str(script.resolve().parent)
    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (folder, old or "") if p)
    return {"PYTHONPATH": old}


def restore(env: dict[str, str | None]) -> None:
    for key, value in env.items():
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value


def python_command(script: Path, args: tuple[str, ...]) -> tuple[str, ...]:
    return (sys.executable, str(script), *args)
