"""``gpudoctor explain TEXT|FILE|-``: from an error message or a whole log to cause, how to verify
and fix. Parses input, calls :func:`gpudoctor.explain.explain_text`, renders."""

from __future__ import annotations

import os
import re
from pathlib import Path

import typer

from gpudoctor.cli.output import FailOn
from gpudoctor.errors import GpuDoctorUserError

_LOG_SUFFIXES = (".log", ".txt", ".out", ".err", ".stderr", ".stdout")


def _looks_like_path(arg: str) -> bool:
    return not any(c.isspace() for c in arg) and (
        os.sep in arg or "/" in arg or arg.lower().endswith(_LOG_SUFFIXES)
    )


_SNIFF = 64 * 1024


def refuse_binary(head: bytes, name: str) -> None:
    """Refuse input that is not text (a core dump, a checkpoint, a gzip): NUL bytes, or mostly
    bytes that are neither printable ASCII, whitespace nor UTF-8, in the first 64 KiB."""
    if not head:
        return
    if b"\0" in head:
        raise GpuDoctorUserError(f"{name} is binary (it contains NUL bytes), not a log: pass the "
                                 "text log (decompress it first if it is .gz)")
    text = head.decode("utf-8", errors="replace")
    bad = text.count("\ufffd") + sum(1 for c in text if ord(c) < 32 and c not in "\t\n\r\f\v\x1b")
    if bad > max(8, len(text) // 10):
        raise GpuDoctorUserError(f"{name} does not look like text ({bad} of {len(text)} characters are "
                                 "not printable): pass the text log")


def read_input(arg: str | None) -> str:
    """The text to explain: stdin for ``-`` (or no argument with piped input), a file's content,
    or the argument itself."""
    from gpudoctor.core.stdin import read_stdin_bytes, stdin_is_terminal

    if arg is not None and not arg.strip():
        raise GpuDoctorUserError("nothing to explain: give an error message, a log file, or '-' "
                                 "to read the log from stdin")
    if arg is None or arg == "-":
        if arg is None and stdin_is_terminal():
            raise GpuDoctorUserError(
                "give an error message, a log file, or '-' to read the log from stdin, e.g. "
                "gpudoctor explain train.log  or  python train.py 2>&1 | gpudoctor explain -"
            )
        data = read_stdin_bytes("pass the log as a file instead: gpudoctor explain train.log")
        refuse_binary(data[:_SNIFF], "stdin")
        return data.decode("utf-8", errors="replace")
    if "\n" not in arg and len(arg) < 4096:
        path = Path(arg)
        try:
            is_dir, is_file = path.is_dir(), path.is_file()
        except OSError:  # e.g. a long error message is not a valid file name: it is the text
            return arg
        if is_dir:
            raise GpuDoctorUserError(f"{arg} is a directory; pass the log file inside it")
        if is_file:
            try:
                with path.open("rb") as handle:
                    refuse_binary(handle.read(_SNIFF), arg)
                    handle.seek(0)
                    return handle.read().decode("utf-8", errors="replace")
            except OSError as exc:
                raise GpuDoctorUserError(f"cannot read {arg}: {exc.strerror}") from None
        if _looks_like_path(arg):
            raise GpuDoctorUserError(
                f"no such file: {arg}. Pass an existing log file, '-' for stdin, or quote the "
                "error message itself"
            )
    return arg


def register(app: typer.Typer) -> None:
    @app.command()
    def explain(
        source: str = typer.Argument(
            None,
            metavar="SOURCE",
            help="An error message, a log file, '-' to read stdin, or a lint code (GD502).",
            show_default=False,
        ),
        json_output: bool = typer.Option(False, "--json", help="Print the report as JSON."),
        fail_on: FailOn = typer.Option(
            FailOn.WARN, "--fail-on",
            help="Exit 1 when a known failure at least this severe matched (catalog entries are errors "
            "or warnings): info, warn, error, or never."),
    ) -> None:
        """Explain a GPU-training error or log: root cause, how to verify it, and the fix.

        Finds the failures it knows in the text, picks the root cause out of a multi-rank log, and
        says for each what causes it, how to verify that, and how to fix it. A lint code prints
        that rule's page.

        Exit codes: 0 no known failure matched (what could be extracted is shown); 1 a known
        failure at or above --fail-on matched (default warn); 2 usage or input error (a missing
        file, a directory, empty or binary input); 130 interrupted.

        \b
        Examples:
          gpudoctor explain "RuntimeError: CUDA error: device-side assert triggered"
          gpudoctor explain train.log
          python train.py 2>&1 | gpudoctor explain -
          gpudoctor explain GD502
        """
        from gpudoctor.cli.output import emit_json, exit_code, fail, stdout_console
        from gpudoctor.explain import explain_text

        if source is not None and re.fullmatch(r"(?i)GD\d{3}", source.strip()):
            from gpudoctor.lint.docs import rule_page
            from gpudoctor.lint.registry import RULES_BY_CODE

            rule = RULES_BY_CODE.get(source.strip().upper())
            if rule is None:
                fail(f"no lint rule {source.strip().upper()}: `gpudoctor lint --help` lists the codes "
                     "(docs/lint.md has them all)")
            typer.echo(rule_page(rule), nl=False)
            return
        try:
            text = read_input(source)
        except GpuDoctorUserError as exc:
            fail(str(exc))
        if not text.strip():
            fail("the input is empty: pass an error message, a log file, or pipe a log into '-'")
        report = explain_text(text)
        if json_output:
            from gpudoctor.records.base import SCHEMA_VERSION

            emit_json({"schema_version": SCHEMA_VERSION, "kind": "explain", "report": report})
        else:
            from gpudoctor.report.explain_view import render_explain

            render_explain(report, stdout_console())
        raise typer.Exit(exit_code([m.severity for m in report.matches], fail_on=fail_on))
