"""The steps of ``gpudoctor fix`` (:mod:`gpudoctor.cli.fix`): run, plan, measure, print, write."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from gpudoctor.cli.fix import (
    PATCHED,
    patched_command,
    python_command,
    restore,
    run_spec,
    script_dir_on_path,
    write_fixed,
)
from gpudoctor.errors import GpuDoctorUserError


def _say(message: str) -> None:
    from gpudoctor.cli.output import stderr_console

    stderr_console().print(f"gpudoctor: {message}", highlight=False, markup=False)


def fix_script(script: Path, args: tuple[str, ...], *, write: bool, measure: bool, steps: int | None,
               repeats: int, out: Path | None, profile: bool = True, json_output: bool = False) -> int:
    """Run, plan, measure and print; write with ``write``. Returns the exit code."""
    from gpudoctor.cli import diagnose as diag
    from gpudoctor.cli.output import stdout_console
    from gpudoctor.cli.run import _one
    from gpudoctor.collectors import outdir
    from gpudoctor.collectors.launch import DEFAULT_STEPS, default_run_dir
    from gpudoctor.fix.project import locate_project

    console = stdout_console()
    source = script.read_bytes().decode("utf-8")  # newlines as they are (CRLF kept)
    try:
        found = locate_project(script, source)
    except (SyntaxError, ValueError) as exc:
        line = getattr(exc, "lineno", None)
        text = (f"{script}{f':{line}' if line else ''}: cannot parse it ({getattr(exc, 'msg', exc)}); "
                "no patch. Fix the syntax error, then run gpudoctor fix again (or gpudoctor run "
                "for the diagnosis alone).")
        if json_output:
            from gpudoctor.cli.output import emit_json

            emit_json({"script": str(script), "error": text, "changes": [], "advice": [], "exit_code": 1})
        else:
            console.print(text, highlight=False, markup=False)
        return 1
    command = python_command(script, args)
    base = out if out is not None else default_run_dir(command)
    outdir.claim(base)
    steps_given, steps = steps is not None, steps if steps is not None else DEFAULT_STEPS
    _say(f"running {script} under the probes ({steps} steps) in {base / 'baseline'}")
    b_out, b_run, findings = _one(run_spec(command, base / "baseline", steps, profile, repeat=False))
    if b_out.exit_code != 0 or not b_run.steps:
        if json_output:
            from gpudoctor.cli.output import emit_json

            emit_json({"script": str(script), "baseline": diag.payload(b_run, findings), "changes": [],
                       "advice": [], "exit_code": b_out.exit_code or 1})
        else:
            diag.render(b_run, findings, console)
        _say(f"the run did not train ({b_out.manifest.status}); fix that first: nothing to patch")
        return b_out.exit_code or 1
    config = b_run.configs[min(b_run.configs)] if b_run.configs else None
    changes, advice, lint_codes = _plan(source, script, found, findings or [], config)
    from gpudoctor.fix.switches import given_switches

    changes, advice = given_switches(changes, advice, tuple(args), findings or [])  # a switch already on: nothing to measure
    sources = {"": source}
    if found.file:  # the loop lives in another module of the project: that file is patched too
        sources[found.file] = Path(found.file).read_bytes().decode("utf-8")
    env = script_dir_on_path(script)
    try:
        outcomes, finals, final_cmp, final_run = _measure_all(
            sources, script, changes, lint_codes, command, base, b_out, b_run, steps, repeats, measure, profile,
            steps_given, found.import_root)
    finally:
        restore(env)
    changed = [f for f in sources if finals[f] != sources[f]]
    flags = [o.change for o in outcomes if o.change.switches and (o.kept or not measure)]
    code = 1 if advice and not changed and not flags else 0
    backups = [write_fixed(Path(f) if f else script, sources[f], finals[f]) for f in changed] if write else []
    diff = "".join(_diffs(sources, finals, script))
    argv, said = argv_for(command, [o.change for o in outcomes if o.kept])
    if json_output:
        from gpudoctor.cli.output import emit_json

        payload = _payload(script, diff, outcomes, advice, b_run, final_cmp, final_run, backups, base, code)
        emit_json({**payload, **_options_payload(script, argv, said)})
        return code
    from gpudoctor.fix.options import shown
    from gpudoctor.fix.switches import switch_lines
    from gpudoctor.fix.view import command_lines

    lines = command_lines(said, shown(argv, str(script)), measured=any(o.kept and o.comparison for o in outcomes))
    lines = [ln for ln in lines if not (flags and ln.startswith("    "))] + switch_lines(
        flags, shown(argv, str(script)), measure)
    _render(console, script, diff, outcomes, advice, b_run, final_cmp, final_run, lines)
    for f, saved in zip(changed, backups):
        console.print(f"wrote {f or script} (the original kept as {saved})", highlight=False, markup=False)
    if changed and not backups:
        import shlex

        rest = f" -- {shlex.join(args)}" if args else ""  # the same command line, measured the same way
        console.print(f"nothing written (--diff); apply it with: gpudoctor fix --write {script}{rest}",
                      highlight=False, markup=False)
    console.print(f"run directory: {base}", highlight=False, markup=False)
    return code


def _plan(source: str, script: Path, found: Any, findings: list, config: Any):
    from gpudoctor.fix.edit import lint_fixes
    from gpudoctor.fix.ops import Advice, Change
    from gpudoctor.fix.plan import plan_fix

    plan = plan_fix(found, findings, config)
    try:
        _, lint_codes = lint_fixes(source, str(script))
    except Exception:  # libcst cannot parse what ast can: every finding gets its text  # noqa: BLE001
        return [], plan.advice + [Advice(code=c.code, reason="libcst cannot parse the file", fix=next(
            (f.fix for f in findings if f.code == c.code), "")) for c in plan.changes], ()
    changes = list(plan.changes)
    if lint_codes:
        changes.append(Change(kind="lint", code=",".join(lint_codes), why="lint --fix's safe rewrites", ops=()))
    return changes, plan.advice, lint_codes


def _diffs(sources: dict[str, str], finals: dict[str, str], script: Path) -> list[str]:
    from gpudoctor.fix.view import unified_diff

    import os

    def name(f: str) -> str:
        rel = os.path.relpath(f) if f else str(script)
        return f if rel.startswith("..") else rel

    return [unified_diff(sources[f], finals[f], name(f)) for f in sources if finals[f] != sources[f]]


def patch_all(sources: dict[str, str], script: Path, changes: list) -> tuple[dict[str, str], list]:
    """Each file of ``sources`` (``""``: the script) with its changes applied; the changes dropped."""
    finals, dropped = {}, []
    for f, text in sources.items():
        mine = [c for c in changes if c.file == f]
        finals[f], lost = patch(text, script, mine)
        dropped += lost
    return finals, dropped


def patch(source: str, script: Path, changes: list) -> tuple[str, list]:
    """The source with ``changes`` applied (lint rewrites last, re-linted); the changes dropped."""
    from gpudoctor.fix.edit import apply_located, lint_fixes

    located = [c for c in changes if c.kind != "lint"]
    code, kept, dropped = apply_located(source, located)
    if any(c.kind == "lint" for c in changes):
        code, _ = lint_fixes(code, str(script))
    return code, dropped


def _slow_start(kinds: list[str], steps: int, steps_given: bool) -> tuple[int, bool]:
    """Steps for a measurement of ``kinds``: ``compile`` compiles in its first steps, so without
    --steps it runs as ``run --try compile`` does (``try_runs.steps_for``); then the 60-step
    baseline cannot be reused (False)."""
    from gpudoctor.cli.try_runs import SLOW_WARMUP_STEPS

    if "compile" in kinds and not steps_given and steps < SLOW_WARMUP_STEPS:
        return SLOW_WARMUP_STEPS, False
    return steps, True


def _measure_all(sources, script, changes, lint_codes, command, base, b_out, b_run, steps, repeats,
                 measure, profile, steps_given=True, import_root=""):
    from gpudoctor.fix.view import Outcome

    outcomes: list[Outcome] = []
    for i, change in enumerate(changes, 1):
        code, dropped = patch_all(sources, script, [change])
        if dropped or (code == sources and argv_for(command, [change])[0] == tuple(command[2:])):
            continue  # not applicable whole: planned but not located (reported by the plan)
        if not measure:
            outcomes.append(Outcome(change=change))
            continue
        folder = base / f"fix-{i}-{change.kind}"
        n, reuse = _slow_start([change.kind], steps, steps_given)
        comparison, _ = _measure_one(code, script, command, folder, (b_out, b_run) if reuse else None, n, repeats,
                                     profile, change.kind, import_root, argv_for(command, [change])[0],
                                     (change.kind,))
        kept = comparison is not None and comparison.judgement is not None and comparison.judgement.recommended
        outcomes.append(Outcome(change=change, comparison=comparison, kept=kept))
    kept = [o.change for o in outcomes if o.kept]
    final, _ = patch_all(sources, script, kept)
    final_cmp = final_run = None
    measured = [o for o in outcomes if o.kept and o.comparison is not None]
    if len(measured) == 1:
        final_cmp = measured[0].comparison
        final_run = _first_try(final_cmp)
    elif len(measured) > 1:
        n, reuse = _slow_start([c.kind for c in kept], steps, steps_given)
        final_cmp, final_run = _measure_one(final, script, command, base / "fix-all", (b_out, b_run) if reuse else None,
                                            n, repeats, profile, "all kept changes", import_root,
                                            argv_for(command, kept)[0], tuple(c.kind for c in kept))
    return outcomes, final, final_cmp, final_run


def argv_for(command: tuple[str, ...], changes: list) -> tuple[tuple[str, ...], list]:
    """The script's arguments for the patched copy of ``changes``: an option whose default they set,
    given on the command line, gets the new value there too (a default does not change what the
    command line sets); and each such option with how the command line set it."""
    from gpudoctor.fix.options import command_line
    from gpudoctor.fix.switches import add_switches

    argv, said = command_line(tuple(command[2:]), [e for c in changes for e in c.options])
    return add_switches(argv, [e for c in changes for e in c.switches]), said


def _first_try(comparison) -> Any:
    from gpudoctor.records.rundir import load_run

    path = next((p for arm, p in comparison.run_dirs if arm == "try"), None)
    return load_run(Path(path)) if path else None


def _copy_module(folder: Path, path: Path, root: Path, code: str) -> None:
    """The patched module in the run-dir copy: its top-level package copied beside the script's
    copy (the copy's folder comes first on ``sys.path``), the module replaced there."""
    import shutil

    from gpudoctor.records.atomic import write_text_atomic

    rel = path.resolve().relative_to(root.resolve())
    if len(rel.parts) > 1 and not (folder / rel.parts[0]).exists():
        shutil.copytree(root / rel.parts[0], folder / rel.parts[0],
                        ignore=shutil.ignore_patterns("__pycache__", "*.pyc", ".git"))
    (folder / rel).parent.mkdir(parents=True, exist_ok=True)
    write_text_atomic(folder / rel, code)


def _measure_one(codes, script, command, folder: Path, first, steps, repeats, profile, what: str, import_root="",
                 argv: tuple[str, ...] | None = None, kinds: tuple[str, ...] = ()):
    """Interleaved A/B of the patched copy in ``folder`` (run with ``argv``; ``kinds``: the changes
    in it) against the original (``first`` reused)."""
    from gpudoctor.cli.run import _one
    from gpudoctor.cli.try_runs import measure
    from gpudoctor.records.atomic import write_text_atomic

    folder.mkdir(parents=True, exist_ok=True)
    copy = folder / script.name
    write_text_atomic(copy, codes[""])
    for f, text in codes.items():
        if f:
            _copy_module(folder, Path(f), Path(import_root), text)
    patched = patched_command(command, copy, argv)
    runs: dict[str, Any] = {}

    def make_spec(run_dir: Path, *, knobs: tuple, repeat: bool) -> Any:
        if knobs == PATCHED:
            return run_spec(patched, run_dir, steps, profile, repeat, kinds)
        return run_spec(command, run_dir, steps, profile, repeat)

    def run_one(spec: Any) -> tuple[Any, Any]:
        outcome, data, _ = _one(spec)
        runs[str(spec.run_dir)] = data
        return outcome, data

    result = measure(make_spec, folder, PATCHED, max_runs=repeats, first=first, run=run_one,
                     on_run=lambda arm, n: _say(f"measuring {what}: {'original' if arm == 'baseline' else 'patched'} "
                                                f"run {n} (at most {repeats} of each)"))
    for outcome, data in result.tried:
        if outcome.exit_code != 0:
            _say(f"the patched script ({what}) ended {outcome.manifest.status}; see {data.path}/stdout.log")
    tried = result.tried[0][1] if result.tried else None
    return result.comparison, tried


def _options_payload(script: Path, argv: tuple[str, ...], said: list) -> dict:
    """``--json``'s command line: the arguments to run the patched script with, and each option
    whose default the patch sets (``set``/``run_with``: how the command line sets it, ``None``
    where it does not)."""
    return {"command": ["python", str(script), *argv],
            "options": [{"flags": list(e.flags), "default": e.value, "was": e.was or None,
                         "set": how[0] if how else None, "run_with": how[1] if how else None} for e, how in said]}


def _payload(script, diff, outcomes, advice, b_run, final_cmp, final_run, backups, base, code) -> dict:
    """The ``--json`` form: every change with its verdict, the advice, the diff and the table."""
    import dataclasses

    from gpudoctor.fix.view import figures, losses

    def judged(outcome) -> dict:
        j = outcome.comparison.judgement if outcome.comparison is not None else None
        return {"kind": outcome.change.kind, "code": outcome.change.code, "why": outcome.change.why,
                "file": outcome.change.file or str(script),
                "precision": outcome.change.precision, "kept": outcome.kept,
                "switches": [[*e.flags[:1], *([e.value] if e.value else [])] for e in outcome.change.switches],
                "verdict": j.verdict if j is not None else None, "gain": j.gain if j is not None else None,
                "noise": j.noise if j is not None else None,
                "runs": [len(j.baseline), len(j.tried)] if j is not None else None}

    before = figures(final_cmp, "before", b_run) if final_cmp is not None else None
    after = figures(final_cmp, "after", final_run) if final_cmp is not None else None
    return {
        "script": str(script), "run_dir": str(base),
        "changes": [judged(o) for o in outcomes],
        "advice": [dataclasses.asdict(a) for a in advice],
        "diff": diff,
        "before": dataclasses.asdict(before) if before is not None else None,
        "after": dataclasses.asdict(after) if after is not None else None,
        "gain": final_cmp.gain if final_cmp is not None else None,
        "noise": final_cmp.judgement.noise if final_cmp is not None and final_cmp.judgement is not None else None,
        "loss": {"before": losses(b_run), "after": losses(final_run)},
        "written": str(backups[0]) if backups else None,
        "backups": [str(b) for b in backups],
        "exit_code": code,
    }


def _render(console, script, diff, outcomes, advice, b_run, final_cmp, final_run, lines=()) -> None:
    from gpudoctor.fix.view import advice_lines, change_line, figures, loss_table, losses, print_lines, table

    name = str(script)
    if not outcomes and not advice:
        console.print(f"{name}: no finding with a code fix; nothing to change", highlight=False, markup=False)
    for i, outcome in enumerate(outcomes, 1):
        console.print(change_line(i, outcome), highlight=False, markup=False)
    for line in advice_lines(advice):  # code lines: never wrapped
        console.print(line, highlight=False, markup=False, soft_wrap=True)
    if diff:
        console.print(diff, highlight=False, markup=False, end="", soft_wrap=True)
    print_lines(console, lines)  # the command line to run the patched script with
    before = figures(final_cmp, "before", b_run)
    after = figures(final_cmp, "after", final_run) if final_cmp is not None else None
    if final_cmp is None:
        from gpudoctor.analysis.try_compare import compare

        before = figures(compare(b_run, b_run), "before", b_run)
    if after is not None:
        title = "before/after (same command and steps, runs interleaved)"
    elif any(o.comparison is not None for o in outcomes):
        title = "before (no change measured faster: nothing to apply)"
    else:
        title = "before (the patch was not measured)" if diff else "before"
    console.print(table(before, after, title))
    precision = [o.change.kind for o in outcomes if o.kept and o.change.precision]
    if final_run is not None:
        console.print(loss_table(losses(b_run), losses(final_run), precision))


__all__ = ["fix_script", "patch"]
