"""What every rule module provides, and the small value a rule yields for each hit.

A rule is a module ``rules/gd<NNN>_<slug>.py`` with:

- ``CODE`` (``"GD101"``), ``NAME`` (the slug), ``MESSAGE`` (one line: what is wrong, what to do),
  ``SEVERITY`` (``"error"``, ``"warning"`` or ``"info"``), ``FIXABLE`` (``--fix`` rewrites it),
  ``RATIONALE`` (why it matters, a paragraph), ``BAD`` and ``GOOD`` (short examples for the docs);
- ``check(ctx: FileContext) -> Iterator[Hit]``: pure, reads the shared scope facts, and stays
  silent whenever it cannot decide statically.
"""

from __future__ import annotations

import ast
from types import ModuleType
from typing import NamedTuple

SEVERITIES = ("error", "warning", "info")
REQUIRED = ("CODE", "NAME", "MESSAGE", "SEVERITY", "FIXABLE", "RATIONALE", "BAD", "GOOD", "check")


class Hit(NamedTuple):
    """One place a rule fires; ``message`` overrides the rule's ``MESSAGE`` when given."""

    node: ast.AST
    message: str | None = None


def validate_rule(module: ModuleType) -> None:
    """Raise ``ValueError`` when a rule module lacks a required attribute (caught by the tests)."""
    missing = [name for name in REQUIRED if not hasattr(module, name)]
    if missing:
        raise ValueError(f"rule module {module.__name__} lacks {missing}: add them (see rules/base.py)")
    if module.SEVERITY not in SEVERITIES:
        raise ValueError(f"{module.CODE}: SEVERITY must be one of {SEVERITIES}")
