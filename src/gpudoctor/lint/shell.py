"""Shell launch scripts (``*.sh``): a line-based context for the rules with ``KIND = "sh"``.

Shell is not parsed: rules read logical lines (continuations joined, comments dropped) and stay
silent on anything they cannot read plainly. ``# noqa: GD413`` works as in Python files.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from types import ModuleType

from gpudoctor.lint.rule_run import noqa_map, run_rule, silenced
from gpudoctor.records.lint import LintViolation


@dataclass(frozen=True)
class ShellLine:
    """One logical line: where it starts, its text without comments, continuations joined."""

    line: int
    col: int
    text: str


@dataclass(frozen=True)
class ShellContext:
    path: str
    source: str
    lines: tuple[ShellLine, ...]


def _strip_comment(text: str) -> str:
    out, quote = [], ""
    for i, ch in enumerate(text):
        if quote:
            quote = "" if ch == quote else quote
        elif ch in "'\"":
            quote = ch
        elif ch == "#" and (i == 0 or text[i - 1].isspace()):
            break
        out.append(ch)
    return "".join(out)


def logical_lines(source: str) -> tuple[ShellLine, ...]:
    out: list[ShellLine] = []
    pending, start, col = "", 0, 1
    for number, raw in enumerate(source.splitlines(), start=1):
        text = _strip_comment(raw)
        if not pending:
            start, col = number, len(text) - len(text.lstrip()) + 1
        if text.rstrip().endswith("\\"):
            pending += text.rstrip()[:-1] + " "
            continue
        joined = (pending + text).strip()
        pending = ""
        if joined:
            out.append(ShellLine(start, col, joined))
    if pending.strip():
        out.append(ShellLine(start, col, pending.strip()))
    return tuple(out)


def lint_shell(source: str, path: str, rules: Sequence[ModuleType]) -> list[LintViolation]:
    """Run the shell rules over one script; never raises for bad input."""
    rules = [rule for rule in rules if getattr(rule, "KIND", "py") == "sh"]
    if not rules:
        return []
    ctx = ShellContext(path=path, source=source, lines=logical_lines(source))
    noqa = noqa_map(source.splitlines())
    out: list[LintViolation] = []
    for rule in rules:
        hits, failed = run_rule(rule, ctx, path)
        if failed is not None:
            out.append(failed)
        for line, col, message in hits:
            if silenced(noqa, rule.CODE, (line,)):
                continue
            out.append(LintViolation(path=path, line=line, col=col, code=rule.CODE, message=message or rule.MESSAGE,
                                     severity=rule.SEVERITY, fixable=False))
    return sorted(out, key=lambda v: (v.line, v.col, v.code))
