"""Environment variables a script sets for itself: ``os.environ["X"] = "1"``, ``setdefault``, ``putenv``."""

from __future__ import annotations

import ast
from collections.abc import Iterator

from gpudoctor.lint.scope import FileContext


def env_sets(ctx: FileContext, names: frozenset[str]) -> Iterator[tuple[str, str, ast.AST]]:
    """``(variable, value, node)`` for each literal assignment of one of ``names``."""
    if not any(name in ctx.source for name in names):
        return
    for stmt, _ in ctx.stmts:
        if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Subscript):
            target = stmt.targets[0]
            if ctx.qualname(target.value) == "os.environ":
                key, value = _literal(target.slice), _literal(stmt.value)
                if key in names and value is not None:
                    yield key, value, stmt
    for call, _ in ctx.calls:
        qual = ctx.qualname(call.func) or ""
        if qual in ("os.environ.setdefault", "os.putenv") and len(call.args) == 2:
            key, value = _literal(call.args[0]), _literal(call.args[1])
            if key in names and value is not None:
                yield key, value, call
        elif qual == "os.environ.update" and call.args and isinstance(call.args[0], ast.Dict):
            for k, v in zip(call.args[0].keys, call.args[0].values):
                key, value = _literal(k), _literal(v)
                if key in names and value is not None:
                    yield key, value, call


def _literal(node: ast.AST | None) -> str | None:
    if isinstance(node, ast.Constant) and isinstance(node.value, (str, int)) and not isinstance(node.value, bool):
        return str(node.value)
    return None
