"""``gpudoctor check``: the layered environment check (driver → runtime → device files →
context → compute → libraries → communication → host), with ``--out`` (freeze) / ``--against``.

Parses options, gathers facts (or reads recorded ones with ``--facts``), applies the pure
rules, renders. Exit codes (the contract of :mod:`gpudoctor.cli.output`): a FAIL row or frozen-env
difference counts as an error finding, a WARN as a warning; 1 when one is at or above
``--fail-on`` (default warn), else 0; 2 a usage error.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

import typer

from gpudoctor.cli.output import FAIL_ON_HELP, FailOn, emit_json, exit_code, fail, pick_out, stdout_console


def _read_facts(path: Path):
    from gpudoctor.records.base import SchemaError, from_dict
    from gpudoctor.records.env import EnvFacts

    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        fail(f"cannot read facts from {path} ({exc}); pass the output of `gpudoctor check --json`")
    if isinstance(data, dict) and "facts" in data:
        data = data["facts"]
    try:
        return from_dict(EnvFacts, data)
    except SchemaError as exc:
        fail(f"{path} does not hold check facts ({exc}); pass the output of `gpudoctor check --json`")


def _read_frozen(path: Path):
    from gpudoctor.analysis.env_diff import KIND
    from gpudoctor.records.base import SchemaError, read_json
    from gpudoctor.records.env import FrozenEnv

    try:
        return read_json(path, FrozenEnv, kind=KIND)
    except FileNotFoundError:
        fail(f"{path} does not exist; write one with `gpudoctor check --out {path}`")
    except (OSError, SchemaError) as exc:
        fail(f"cannot use {path} as a frozen environment ({exc}); write one with gpudoctor check --out FILE")


def _own_requirements() -> tuple[str, ...]:
    """gpudoctor's declared dependencies (``"rich>=13.0"``), extras left out."""
    from importlib import metadata

    try:
        return tuple(r for r in metadata.requires("gpudoctor") or () if "extra ==" not in r)
    except metadata.PackageNotFoundError:
        return ()


def _lock_targets(directory: Path) -> tuple[Path, Path]:
    """The two files ``--lock DIR`` writes; refuses (exit 2, nothing written) when either exists."""
    from gpudoctor.analysis.env_lock import DOCKERFILE, LOCK_FILE

    if directory.exists() and not directory.is_dir():
        fail(f"--lock {directory}: not a directory; give a directory for {LOCK_FILE} and {DOCKERFILE}")
    targets = (directory / LOCK_FILE, directory / DOCKERFILE)
    existing = [str(t) for t in targets if t.exists() or t.is_symlink()]
    if existing:
        fail(f"--lock {directory}: {' and '.join(existing)} already there; gpudoctor never "
             "overwrites them - move them away or choose another directory")
    return targets


def _write_lock(directory: Path, frozen) -> None:
    from gpudoctor.analysis.env_lock import lock_files
    from gpudoctor.records.atomic import write_text_atomic

    lock_path, docker_path = _lock_targets(directory)
    files = lock_files(frozen, _own_requirements())
    try:
        directory.mkdir(parents=True, exist_ok=True)
        write_text_atomic(lock_path, files.requirements)
        write_text_atomic(docker_path, files.dockerfile)
    except OSError as exc:
        fail(f"cannot write into {directory} ({exc}); choose a writable directory")
    how = "" if files.image_exact else " (a fallback: no CUDA build of torch recorded; see its comments)"
    from gpudoctor.cli.output import stderr_console

    stderr_console().print(f"wrote {lock_path} and {docker_path} (FROM {files.image}{how})",
                           highlight=False, markup=False)


_JUNIT_SUITE = "gpudoctor check"


def _junit_target(path: Path) -> None:
    """``--junit FILE`` may be new, or a report an earlier ``check --junit`` wrote; nothing else."""
    if path.is_dir():
        fail(f"--junit {path}: that is a directory; give a file name, e.g. {path / 'check.xml'}")
    if path.exists():
        try:
            head = path.read_text(encoding="utf-8", errors="replace")[:300]
        except OSError as exc:
            fail(f"--junit {path}: cannot read it ({exc}); give a new file")
        if f'<testsuites name="{_JUNIT_SUITE}"' not in head:
            fail(f"--junit {path}: the file exists and is not a gpudoctor check report; give a new file "
                 "(nothing was overwritten)")


def junit_report(report, differences, fail_on: FailOn) -> str:
    """``check`` as JUnit XML: a case per row (classname ``gpudoctor.check.<layer>``) and per
    ``--against`` difference; a row at or above ``fail_on`` fails, a SKIP row is skipped."""
    from gpudoctor.lint.formats import JUnitCase, junit_xml

    def failures(verdict: str, message: str, text: str) -> tuple:
        failed = exit_code([verdict], fail_on=fail_on) != 0
        return ((message, verdict.upper(), text),) if failed else ()

    cases = []
    for row in report.results:
        text = row.evidence + (f"\nfix: {row.fix}" if row.fix else "")
        cases.append(JUnitCase(
            f"gpudoctor.check.{row.layer.value}", row.name,
            failures(row.verdict.value, f"{row.verdict.value.upper()}: {row.evidence}", text),
            skipped=row.evidence if row.verdict.value == "skip" else None))
    for d in differences or ():
        cases.append(JUnitCase("gpudoctor.check.against", d.field, failures(
            d.verdict.value, f"{d.field}: {d.here} here, {d.there} there", d.why)))
    return junit_xml(_JUNIT_SUITE, cases, empty=JUnitCase("gpudoctor.check", "no checks"))


def _write_junit(path: Path, report, differences, fail_on: FailOn) -> None:
    from gpudoctor.records.atomic import write_text_atomic

    try:
        write_text_atomic(path, junit_report(report, differences, fail_on))
    except OSError as exc:
        fail(f"cannot write {path} ({exc}); choose a writable path")


def register(app: typer.Typer) -> None:
    @app.command()
    def check(
        json_output: bool = typer.Option(False, "--json", help="Print JSON (rows, verdict, facts) on stdout."),
        timeout: float = typer.Option(
            60.0, "--timeout", help="Seconds the torch/GPU probe subprocess may run before it is "
            "killed and reported as hung."),
        freeze: Optional[Path] = typer.Option(
            None, "--out", "-o", metavar="FILE",
            help="Also write what matters for reproducing this environment (a frozen environment) to FILE."),
        freeze_old: Optional[Path] = typer.Option(None, "--freeze", hidden=True, help="The earlier name of --out."),
        against: Optional[Path] = typer.Option(
            None, "--against", metavar="FILE",
            help="Compare with an environment frozen earlier (--out) and explain each difference."),
        facts_file: Optional[Path] = typer.Option(
            None, "--facts", metavar="FILE",
            help="Judge facts recorded earlier (a `check --json` output) instead of probing this machine."),
        fail_on: FailOn = typer.Option(FailOn.WARN, "--fail-on", help=FAIL_ON_HELP + " A FAIL row is an "
                                       "error, a WARN row a warning."),
        lock: Optional[Path] = typer.Option(
            None, "--lock", metavar="DIR",
            help="Also write DIR/requirements.lock (exact versions, torch's wheel variant and its "
            "index) and DIR/Dockerfile (the official PyTorch CUDA image of that torch); never "
            "overwrites them."),
        lock_from: Optional[Path] = typer.Option(
            None, "--from", metavar="FILE",
            help="With --lock: build it from an environment recorded with --out, without "
            "checking this machine."),
        junit: Optional[Path] = typer.Option(
            None, "--junit", metavar="FILE",
            help="Also write JUnit XML for CI to FILE: a test case per row (and per --against "
            "difference), failed at or above --fail-on, skipped for SKIP rows."),
        cluster: bool = typer.Option(
            False, "--cluster",
            help="Under torchrun, on every node: compare all ranks' environments (rank 0 prints "
            "what differs), check the rendezvous store, NCCL's interfaces, and time an all-reduce "
            "between nodes and within each (--timeout bounds joining the group)."),
    ) -> None:
        """Check the GPU stack layer by layer: which layer is broken, and how to fix it.

        Layers, bottom first: driver, runtime (torch's CUDA), device files, context, compute,
        libraries (cuDNN, NCCL), communication, host. Without torch (the core install) the torch
        layers are skipped and say so.

        Exit codes: 0 no row at or above --fail-on; 1 a row (or a difference from --against) at
        or above --fail-on (default warn; a FAIL row is an error); 2 usage or input error; 130
        interrupted.

        \b
        Examples:
          gpudoctor check
          gpudoctor check --out env.json         # on the machine that works
          gpudoctor check --against env.json     # on the one that does not
          gpudoctor check --json --fail-on error
          gpudoctor check --lock rebuild/   # requirements.lock + Dockerfile
          gpudoctor check --lock rebuild/ --from env.json
          gpudoctor check --junit check.xml     # for the CI's test report
          torchrun --nnodes 2 --nproc-per-node 1 --rdzv-backend c10d \\
            --rdzv-endpoint node0:29500 -m gpudoctor check --cluster   # on each node
        """
        freeze = pick_out(freeze, freeze_old, "--freeze")
        if timeout <= 0:
            fail(f"--timeout must be a positive number of seconds, got {timeout}; try 60")
        if cluster:
            if freeze or against or facts_file or lock or lock_from:
                fail("--cluster compares the nodes of a running torchrun job; run --out, "
                     "--against, --facts and --lock without it")
            from gpudoctor.cli.check_cluster import run_cluster

            raise typer.Exit(run_cluster(timeout_s=timeout, fail_on=fail_on, json_output=json_output))
        from gpudoctor.analysis.env_diff import KIND, diff, freeze as freeze_env
        from gpudoctor.analysis.env_rules import check_env
        from gpudoctor.records.base import SCHEMA_VERSION, write_json

        if lock_from is not None:
            if lock is None:
                fail("--from FILE builds --lock DIR; give --lock DIR too")
            _lock_targets(lock)
            _write_lock(lock, _read_frozen(lock_from))
            raise typer.Exit(0)
        if lock is not None:
            _lock_targets(lock)  # refuse existing files before the probe
        if junit is not None:
            _junit_target(junit)  # refuse a file of someone else's before the probe
        frozen_there = _read_frozen(against) if against is not None else None  # fail before probing
        if facts_file is not None:
            facts = _read_facts(facts_file)
        else:
            from gpudoctor.cli.progress import Progress
            from gpudoctor.collectors.env import gather_facts

            with Progress() as progress:  # stderr: the probe takes seconds (up to --timeout)
                progress.stage("checking the GPU stack: driver, runtime, devices, context, compute")
                facts = gather_facts(timeout_s=timeout)
        report = check_env(facts)
        here = freeze_env(facts)
        differences = diff(here, frozen_there) if frozen_there is not None else None
        if freeze is not None:
            try:
                write_json(freeze, here, kind=KIND)
            except OSError as exc:
                fail(f"cannot write {freeze} ({exc}); choose a writable path")
        if lock is not None:
            _write_lock(lock, here)
        verdicts = [r.verdict.value for r in report.results] + [d.verdict.value for d in differences or ()]
        if junit is not None:
            _write_junit(junit, report, differences, fail_on)
        if json_output:
            emit_json({"schema_version": SCHEMA_VERSION, "kind": "gpudoctor.check",
                       "verdict": report.worst, "summary": report.summary,
                       "duration_ms": report.duration_ms, "results": report.results,
                       "differences": differences, "facts": facts})
        else:
            from gpudoctor.report.check_view import render_check

            render_check(stdout_console(), report, differences=differences,
                         against=str(against or ""), frozen_to=str(freeze or ""))
        raise typer.Exit(exit_code(verdicts, fail_on=fail_on))
