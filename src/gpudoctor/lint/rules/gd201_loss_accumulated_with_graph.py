"""GD201: a running total that adds the loss tensor itself, keeping every step's graph alive."""

from __future__ import annotations

import ast
from collections.abc import Iterator

from gpudoctor.lint.graph import loss_names
from gpudoctor.lint.rules.base import Hit
from gpudoctor.lint.scope import FileContext, call_name

CODE = "GD201"
NAME = "loss-accumulated-with-graph"
SEVERITY = "error"
FIXABLE = False
MESSAGE = (
    "loss tensor added to a running total keeps every step's graph alive: add `loss.item()` or "
    "`loss.detach()`"
)
RATIONALE = (
    "`total_loss += loss` makes `total_loss` a tensor whose history includes every iteration's "
    "graph, so activations are never freed and memory climbs step after step until CUDA runs out "
    "of memory. Accumulate `loss.item()` (a Python float, one sync) or `loss.detach()` (stays on "
    "the GPU, no sync). The rule fires on names that `.backward()` is called on, inside the loop "
    "that calls it; gradient-accumulation code that calls `.backward()` on the total is left "
    "alone, and so is a total reset to a number inside that same step loop (`running_loss = 0` at "
    "each optimizer step): it lives one accumulation window, not the whole run."
)
BAD = ("total = 0.0\nfor x, y in loader:\n    loss = criterion(model(x), y)\n    loss.backward()\n"
       "    total += loss\n")
GOOD = ("total = 0.0\nfor x, y in loader:\n    loss = criterion(model(x), y)\n    loss.backward()\n"
        "    total += loss.detach()\n")


def _added_loss(value: ast.AST, losses: set[str]) -> str | None:
    if isinstance(value, ast.Name) and value.id in losses:
        return value.id
    if isinstance(value, ast.BinOp) and isinstance(value.op, (ast.Add, ast.Sub, ast.Mult, ast.Div)):
        return _added_loss(value.left, losses) or _added_loss(value.right, losses)
    return None


def _detached(ctx: FileContext, func: object) -> set[str]:
    """Names that are also assigned ``x.item()`` / ``x.detach()`` in ``func``: not certain graphs."""
    out = set()
    for stmt, where in ctx.stmts:
        if where.func is func and isinstance(stmt, ast.Assign) and isinstance(stmt.value, ast.Call):
            if call_name(stmt.value) in ("item", "detach", "tolist", "float") or (
                    isinstance(stmt.value.func, ast.Name) and stmt.value.func.id == "float"):
                out |= {t.id for t in stmt.targets if isinstance(t, ast.Name)}
    return out


def _reset_in_loop(ctx: FileContext, target: str, where) -> bool:
    """``target`` is set back to a number inside the innermost step loop around the addition
    (``running_loss = 0`` at each optimizer step): the total spans one accumulation window."""
    loops = [loop for loop in where.loops if loop in ctx.step_loops]
    if not loops:
        return False
    for stmt, at in ctx.stmts:
        if (at.func is where.func and loops[-1] in at.loops and isinstance(stmt, ast.Assign)
                and any(isinstance(t, ast.Name) and t.id == target for t in stmt.targets)
                and isinstance(stmt.value, ast.Constant) and type(stmt.value.value) in (int, float)):
            return True
    return False


def check(ctx: FileContext) -> Iterator[Hit]:
    for stmt, where in ctx.stmts:
        if where.no_grad or not any(loop in ctx.step_loops for loop in where.loops):
            continue
        if isinstance(stmt, ast.AugAssign) and isinstance(stmt.op, ast.Add) and isinstance(stmt.target, ast.Name):
            target, value = stmt.target.id, stmt.value
        elif (isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name)
              and isinstance(stmt.value, ast.BinOp) and isinstance(stmt.value.op, ast.Add)
              and isinstance(stmt.value.left, ast.Name) and stmt.value.left.id == stmt.targets[0].id):
            target, value = stmt.targets[0].id, stmt.value.right
        else:
            continue
        losses = loss_names(ctx, where.func) - _detached(ctx, where.func)
        if target in losses:
            continue  # accumulating a loss that is itself back-propagated: intended
        name = _added_loss(value, losses)
        if name and not _reset_in_loop(ctx, target, where):
            yield Hit(stmt, f"`{target} += {name}` keeps every step's autograd graph alive: "
                            f"add `{name}.item()` or `{name}.detach()`")
