"""Metrics read every step that can be read when printed instead: ``acc += loss.item()`` (a host
sync per step) becomes ``acc += loss.detach()`` (summed on the device) when ``acc`` is read only
where a 0-d tensor prints exactly like its value — formatted fields with a spec — and otherwise only
reset to a number. The sum is then read once per print, not once per step (GD-RUN-HOST-SYNC).
"""

from __future__ import annotations

import ast
import string

from gpudoctor.fix.locate import Located


def item_accumulations(found: Located) -> list[ast.Call]:
    """The ``.item()`` calls of ``acc += X.item()`` in the training loop, unguarded, whose ``acc``
    is read only through formatted fields with a spec (``f"{acc / 20:.3f}"``, ``"{:.3f}".format(acc)``:
    a 0-d tensor formats like its value)
    and otherwise only reset to a number — so summing the tensor instead changes no output."""
    if found.loop is None:
        return []
    scope = found.func or found.ctx.tree
    out = []
    for node in ast.walk(found.loop):
        if not (isinstance(node, ast.AugAssign) and isinstance(node.op, ast.Add)
                and isinstance(node.target, ast.Name) and isinstance(node.value, ast.Call)
                and isinstance(node.value.func, ast.Attribute) and node.value.func.attr == "item"
                and not node.value.args):
            continue
        if _only_formatted(scope, node.target.id, node):
            out.append(node.value)
    return out


def _spec_fields(text: str) -> tuple[list[bool], dict[str, bool]] | None:
    """For ``text.format(...)``: per automatic/numbered field, and per named field, whether it has a
    format spec; ``None`` when the string does not parse as a format string."""
    positional: dict[int, bool] = {}
    named: dict[str, bool] = {}
    auto = 0
    try:
        for _, field, spec, _ in string.Formatter().parse(text):
            if field is None:
                continue
            key = field.split(".")[0].split("[")[0]
            if key == "":
                positional[auto], auto = bool(spec), auto + 1
            elif key.isdigit():
                positional[int(key)] = positional.get(int(key), True) and bool(spec)
            else:
                named[key] = named.get(key, True) and bool(spec)
    except ValueError:
        return None
    return [positional.get(i, False) for i in range(max(positional, default=-1) + 1)], named


def _formatted_ids(scope: ast.AST) -> set[int]:
    """ids of the nodes inside a formatted field with a spec: ``f"{x:.3f}"``, ``"{:.3f}".format(x)``
    (a 0-d tensor formats like its value there)."""
    out: set[int] = set()
    for node in ast.walk(scope):
        if isinstance(node, ast.FormattedValue) and node.format_spec is not None:
            out |= {id(n) for n in ast.walk(node.value)}
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "format"
              and isinstance(node.func.value, ast.Constant) and isinstance(node.func.value.value, str)):
            fields = _spec_fields(node.func.value.value)
            if fields is None or any(isinstance(a, ast.Starred) for a in node.args):
                continue
            positional, named = fields
            for i, arg in enumerate(node.args):
                if i < len(positional) and positional[i]:
                    out |= {id(n) for n in ast.walk(arg)}
            for kw in node.keywords:
                if kw.arg is not None and named.get(kw.arg):
                    out |= {id(n) for n in ast.walk(kw.value)}
    return out


def _only_formatted(scope: ast.AST, name: str, aug: ast.AugAssign) -> bool:
    formatted = _formatted_ids(scope)
    for node in ast.walk(scope):
        if isinstance(node, ast.Name) and node.id == name:
            if isinstance(node.ctx, ast.Load) and id(node) not in formatted:
                return False
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == name for t in node.targets):
            if not (len(node.targets) == 1 and isinstance(node.value, ast.Constant)
                    and isinstance(node.value.value, (int, float))):
                return False
        if isinstance(node, ast.AugAssign) and node is not aug and isinstance(node.target, ast.Name) \
                and node.target.id == name:
            return False
    return True


__all__ = ["item_accumulations"]
