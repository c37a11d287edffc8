"""What the Python and the shell linters do alike with each rule: run it, and honour ``# noqa``.

A rule that raises becomes one ``error`` violation naming it (a rule's bug must not hide the
other rules' results). ``# noqa`` silences every rule on its line, ``# noqa: GD201, GD413`` only
the codes it names (exact codes, any case).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from types import ModuleType
from typing import Any

from gpudoctor.records.lint import LintViolation

_NOQA = re.compile(r"#\s*noqa(?::\s*(?P<codes>[A-Z]+[0-9]+(?:[\s,]+[A-Z]+[0-9]+)*))?", re.IGNORECASE)

NoqaMap = dict[int, frozenset[str] | None]


def run_rule(rule: ModuleType, ctx: Any, path: str) -> tuple[list[Any], LintViolation | None]:
    """``rule.check(ctx)``'s hits, or no hits and a violation saying the rule itself failed."""
    try:
        return list(rule.check(ctx)), None
    except Exception as exc:  # a rule bug must not hide the other rules' results
        return [], LintViolation(path=path, line=1, col=1, code=rule.CODE, severity="error",
                                 message=f"internal error in rule {rule.CODE}: {exc!r}; please report it")


def noqa_map(lines: list[str]) -> NoqaMap:
    """line (1-based) -> codes silenced on it (``None`` for a bare ``# noqa``, which silences all)."""
    out: NoqaMap = {}
    for number, line in enumerate(lines, start=1):
        if "noqa" not in line.lower():
            continue
        match = _NOQA.search(line)
        if match:
            codes = match.group("codes")
            out[number] = frozenset(re.split(r"[\s,]+", codes.upper())) if codes else None
    return out


def silenced(noqa: NoqaMap, code: str, lines: Iterable[int]) -> bool:
    """True when a ``# noqa`` on any of ``lines`` covers ``code``."""
    for line in lines:
        if line in noqa:
            codes = noqa[line]
            if codes is None or code in codes:
                return True
    return False


__all__ = ["NoqaMap", "noqa_map", "run_rule", "silenced"]
