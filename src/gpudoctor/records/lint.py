"""Lint results: one violation per anti-pattern found, and the report of a whole lint run."""

from __future__ import annotations

from gpudoctor.records.base import record


@record
class LintViolation:
    """One anti-pattern found at one place in one file.

    Attributes:
        path: the file, as given on the command line (or found below a given directory).
        line: 1-based line of the offending expression.
        col: 1-based column (in characters) of the offending expression.
        code: the rule's code, e.g. ``"GD101"``; ``"E999"`` for a file that does not parse.
        message: what is wrong and what to do, in one line.
        severity: ``"error"``, ``"warning"`` or ``"info"``.
        fixable: whether ``gpudoctor lint --fix`` rewrites it.
        cell: in a notebook, the 0-based index into its ``cells`` list (``line`` then counts
            from 1 within that cell); None for a plain file.
    """

    path: str
    line: int
    col: int
    code: str
    message: str
    severity: str = "warning"
    fixable: bool = False
    cell: int | None = None


@record
class LintReport:
    """Everything a lint run found.

    Attributes:
        files_checked: how many files were read (including those that did not parse).
        violations: what was found, sorted by path, line, column and code.
        fixed: how many violations ``--fix`` rewrote (0 without ``--fix``).
    """

    files_checked: int
    violations: tuple[LintViolation, ...] = ()
    fixed: int = 0
