"""GD202: model outputs or losses appended to a list without ``.detach()`` outside no_grad."""

from __future__ import annotations

import ast
from collections.abc import Iterator

from gpudoctor.lint.graph import carries_graph, graph_names
from gpudoctor.lint.rules.base import Hit
from gpudoctor.lint.scope import FileContext

CODE = "GD202"
NAME = "outputs-kept-with-graph"
SEVERITY = "error"
FIXABLE = False
MESSAGE = "tensor with an autograd graph appended to a list: append `.detach()` (or `.detach().cpu()`)"
RATIONALE = (
    "Appending `output` or `loss` to a list that outlives the iteration keeps each step's whole "
    "graph and activations alive; memory grows every step until the OOM. `.cpu()` alone does not "
    "help, the copy still records its history. Append `output.detach()` / "
    "`output.detach().cpu()`, or run evaluation under `torch.no_grad()` / "
    "`torch.inference_mode()`. The rule fires only for outputs of a known model or criterion, or "
    "a loss that `.backward()` is called on."
)
BAD = "preds = []\nfor x, _ in loader:\n    out = model(x)\n    preds.append(out)\n"
GOOD = ("preds = []\nwith torch.no_grad():\n    for x, _ in loader:\n        preds.append(model(x))\n"
        "for x, _ in loader:\n    preds.append(model(x).detach().cpu())\n")


def _inside(node: ast.AST, loop: ast.AST) -> bool:
    return loop.lineno <= getattr(node, "lineno", 0) <= (loop.end_lineno or loop.lineno)


def _self_list(ctx: FileContext, holder: ast.AST, where) -> bool:
    """``self.<attr>`` assigned a list literal in its class, and never inside this loop."""
    if not (isinstance(holder, ast.Attribute) and isinstance(holder.value, ast.Name) and holder.value.id == "self"):
        return False
    values = ctx.attr_assigns.get(ctx.func_cls.get(where.func), {}).get(holder.attr, [])
    return bool(values) and all(isinstance(v, (ast.List, ast.ListComp)) or (
        isinstance(v, ast.Call) and isinstance(v.func, ast.Name) and v.func.id == "list") for v, _ in values
    ) and not any(_inside(v, where.loop) for v, _ in values)


def check(ctx: FileContext) -> Iterator[Hit]:
    for stmt, where in ctx.stmts:
        if where.no_grad or where.loop is None or not isinstance(stmt, ast.Expr):
            continue
        call = stmt.value
        if not (isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute)
                and call.func.attr == "append" and len(call.args) == 1):
            continue
        holder = call.func.value
        if isinstance(holder, ast.Name):
            values = ctx.assigned(holder.id, where.func)
            # the list must outlive the loop: every assignment to it is outside the innermost loop
            if not values or any(_inside(v, where.loop) for v in values):
                continue
        elif not _self_list(ctx, holder, where):  # ``self.scores``: lives as long as the object
            continue
        if carries_graph(ctx, call.args[0], where, graph_names(ctx, where.func)):
            yield Hit(call)
