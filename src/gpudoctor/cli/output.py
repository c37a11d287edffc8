"""Consoles, JSON emission and the exit-code policy shared by every command.

Results go to stdout, messages to stderr. The exit-code contract of every command
(:func:`exit_code` decides it):

* 0: nothing to act on;
* 1: a finding at or above ``--fail-on`` (default ``warn``), or a failed check (the run made no
  optimizer step, stalled, a baseline did not train);
* 2: a usage or input error;
* 130: interrupted (Ctrl-C).

``run`` (and ``memory run``) pass a script's own non-zero exit code through (128+N when it was
killed by signal N): it takes precedence over 1.
"""

from __future__ import annotations

import enum
import json
import sys
from collections.abc import Iterable
from typing import Any, NoReturn

import typer

EXIT_OK = 0
EXIT_FINDINGS = 1
EXIT_USAGE = 2
EXIT_INTERRUPTED = 130

CONTRACT_HELP = (
    "Exit codes: 0 nothing to act on; 1 findings at or above --fail-on, or a failed check; "
    "2 usage or input error; 130 interrupted."
)


class FailOn(str, enum.Enum):
    """``--fail-on``: the lowest finding severity that makes the exit code 1."""

    INFO = "info"
    WARN = "warn"
    ERROR = "error"
    NEVER = "never"


_RANKS = {"info": 0, "warn": 1, "warning": 1, "error": 2, "fail": 2}
FAIL_ON_HELP = "Exit 1 when a finding is at least this severe: info, warn, error, or never."


def exit_code(severities: Iterable[str] = (), *, fail_on: FailOn | str = FailOn.WARN,
              failed: bool = False, passthrough: int = 0) -> int:
    """The exit code of a command, by the contract in this module's docstring.

    ``severities``: of the command's findings ("info", "warn"/"warning", "error"/"fail"; others,
    such as a check's "pass" and "skip", count for nothing). ``failed``: the command's own work
    failed (1 whatever ``fail_on`` says). ``passthrough``: a non-zero code that wins over both: a
    script's own exit code, or 130 when interrupted.
    """
    if passthrough:
        return passthrough
    if failed:
        return EXIT_FINDINGS
    level = FailOn(fail_on).value
    if level == "never":
        return EXIT_OK
    threshold = _RANKS[level]
    worst = max((_RANKS.get(str(s).lower(), -1) for s in severities), default=-1)
    return EXIT_FINDINGS if worst >= threshold else EXIT_OK


def stdout_console(width: int | None = None):
    from rich.console import Console

    return Console(file=sys.stdout, width=width, soft_wrap=False)


def stderr_console():
    from rich.console import Console

    # soft_wrap: messages hold paths and commands that must stay copy-pasteable
    return Console(file=sys.stderr, stderr=True, soft_wrap=True)


def pick_out(out: Any, old: Any, old_name: str) -> Any:
    """``--out/-o`` is where every command writes its results; ``old_name`` is the option's
    earlier name (``--output``, ``--freeze``), still accepted, hidden from ``--help``."""
    if old is None:
        return out
    from gpudoctor.errors import GpuDoctorUserError

    if out is not None:
        raise GpuDoctorUserError(f"{old_name} is the earlier name of --out; give one of them")
    stderr_console().print(f"note: {old_name} is now --out (or -o); the old name still works", highlight=False,
                           markup=False)
    return old


def emit_json(payload: Any) -> None:
    """Print ``payload`` (plain data or records) as indented JSON on stdout."""
    from gpudoctor.records.base import to_dict

    sys.stdout.write(json.dumps(to_dict(payload), indent=2, allow_nan=False) + "\n")
    sys.stdout.flush()


def fail(message: str, code: int = EXIT_USAGE) -> NoReturn:
    """Print ``message`` on stderr and exit with ``code``."""
    stderr_console().print(f"[bold red]error:[/] {message}", highlight=False)
    raise typer.Exit(code)
