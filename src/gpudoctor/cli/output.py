"""Consoles, JSON emission and the exit-code policy shared by every command.

Results go to stdout, messages to stderr. Exit codes: 0 ok, 1 a finding/check at or above the
failure threshold, 2 a usage error (bad input), 130 interrupted.
"""

from __future__ import annotations

import json
import sys
from typing import Any, NoReturn

import typer

EXIT_OK = 0
EXIT_FINDINGS = 1
EXIT_USAGE = 2
EXIT_INTERRUPTED = 130


def stdout_console(width: int | None = None):
    from rich.console import Console

    return Console(file=sys.stdout, width=width, soft_wrap=False)


def stderr_console():
    from rich.console import Console

    # soft_wrap: messages hold paths and commands that must stay copy-pasteable
    return Console(file=sys.stderr, stderr=True, soft_wrap=True)


def emit_json(payload: Any) -> None:
    """Print ``payload`` (plain data or records) as indented JSON on stdout."""
    from gpudoctor.records.base import to_dict

    sys.stdout.write(json.dumps(to_dict(payload), indent=2, allow_nan=False) + "\n")
    sys.stdout.flush()


def fail(message: str, code: int = EXIT_USAGE) -> NoReturn:
    """Print ``message`` on stderr and exit with ``code``."""
    stderr_console().print(f"[bold red]error:[/] {message}", highlight=False)
    raise typer.Exit(code)
