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
    """The ``X.item()`` calls of ``acc += X.item()``, and the ``X.item()``/``X.cpu()`` calls of
    ``metrics.append(X.item())``, unguarded in the training loop, whose ``acc``/``metrics`` is read
    only through formatted fields with a spec (``f"{acc / 20:.3f}"``, ``"{:.3f}".format(acc)``,
    ``f"{sum(metrics[-20:]) / 20:.4f}"``: a 0-d tensor formats like its value), appended to, and
    otherwise only reset (to a number, ``[]``) — so keeping the tensor instead changes no output."""
    if found.loop is None:
        return []
    scope = found.func or found.ctx.tree
    out = []
    for node, where in found.ctx.stmts:
        if where.guarded or found.loop not in where.loops:
            continue
        if (isinstance(node, ast.AugAssign) and isinstance(node.op, ast.Add) and isinstance(node.target, ast.Name)
                and _read(node.value, ("item",))):
            name = node.target.id
        elif (isinstance(node, ast.Expr) and isinstance(node.value, ast.Call) and len(node.value.args) == 1
              and isinstance(node.value.func, ast.Attribute) and node.value.func.attr == "append"
              and isinstance(node.value.func.value, ast.Name) and _read(node.value.args[0], ("item", "cpu"))):
            name = node.value.func.value.id
        else:
            continue
        call = node.value if isinstance(node, ast.AugAssign) else node.value.args[0]
        if _only_formatted(scope, name, node) and not synced_elsewhere(found, call):
            out.append(call)
    return out


def synced_elsewhere(found: Located, call: ast.Call) -> bool:
    """``X.item()`` is also called on the same ``X`` by another unguarded simple statement of the loop
    (Pytorch-UNet's ``experiment.log({'train loss': loss.item()})`` beside ``epoch_loss +=
    loss.item()``): the step syncs on ``X`` anyway, so keeping the sum on the device gains nothing."""
    recv = ast.unparse(call.func.value)
    return any(n is not call and isinstance(n, ast.Call) and _read(n, ("item",)) and ast.unparse(n.func.value) == recv
               for stmt, where in found.ctx.stmts if not where.guarded and found.loop in where.loops
               and not hasattr(stmt, "body") for n in ast.walk(stmt))


def item_reason(found: Located) -> str:
    """Why no ``item`` change: the metric's value is read by the step elsewhere, or no such metric."""
    if found.loop is not None and any(
            synced_elsewhere(found, c) for stmt, where in found.ctx.stmts
            if not where.guarded and found.loop in where.loops and isinstance(stmt, (ast.AugAssign, ast.Expr))
            for c in ast.walk(stmt) if isinstance(c, ast.Call) and _read(c, ("item",))):
        return ("the loss's .item() is also read unguarded elsewhere in the step (a log or progress line): the "
                "host sync stays; read it every N steps instead")
    return "no `total += loss.item()` or `losses.append(loss.item())` read only in formatted output in the training loop"


def _read(expr: ast.AST, methods: tuple[str, ...]) -> bool:
    return (isinstance(expr, ast.Call) and not expr.args and not expr.keywords
            and isinstance(expr.func, ast.Attribute) and expr.func.attr in methods)


def _reset(target: ast.AST, value: ast.AST, name: str) -> bool | None:
    """``name = 0.0`` / ``name = []`` / ``a, name = [], []``: True; another assignment to ``name``:
    False; not an assignment to ``name``: None."""
    if isinstance(target, ast.Name):
        if target.id != name:
            return None
        return (isinstance(value, ast.Constant) and isinstance(value.value, (int, float))
                and not isinstance(value.value, bool)) or (isinstance(value, ast.List) and not value.elts)
    if isinstance(target, (ast.Tuple, ast.List)):
        if not any(isinstance(t, ast.Name) and t.id == name for t in ast.walk(target)):
            return None
        if not isinstance(value, (ast.Tuple, ast.List)) or len(value.elts) != len(target.elts):
            return False
        results = [_reset(t, v, name) for t, v in zip(target.elts, value.elts)]
        return all(r is not False for r in results)
    return None


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


def _only_formatted(scope: ast.AST, name: str, stmt: ast.stmt) -> bool:
    formatted = _formatted_ids(scope)
    appends = {id(n.func.value) for n in ast.walk(scope) if isinstance(n, ast.Call)
               and isinstance(n.func, ast.Attribute) and n.func.attr == "append" and isinstance(n.func.value, ast.Name)}
    for node in ast.walk(scope):
        if isinstance(node, ast.Name) and node.id == name and isinstance(node.ctx, ast.Load):
            if id(node) not in formatted and id(node) not in appends:
                return False
        if isinstance(node, ast.Assign):
            if any(_reset(t, node.value, name) is False for t in node.targets):
                return False
        elif isinstance(node, (ast.AugAssign, ast.AnnAssign)) and node is not stmt \
                and isinstance(node.target, ast.Name) and node.target.id == name:
            return False
        elif isinstance(node, (ast.For, ast.comprehension)) and any(
                isinstance(n, ast.Name) and n.id == name for n in ast.walk(node.target)):
            return False  # bound by a loop: not (only) the accumulator
    return True


__all__ = ["item_accumulations"]
