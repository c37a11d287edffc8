"""Which names carry an autograd graph: losses that ``.backward()`` is called on, and outputs of
calling a known module. Used by the rules about keeping graphs alive and syncing every step."""

from __future__ import annotations

import ast

from gpudoctor.lint.scope import TENSOR_METHODS, FileContext, Where, call_name

_BACKWARD_OWNERS = ("accelerator", "fabric", "engine", "trainer", "runner")
_DETACHING = frozenset({"detach", "item", "tolist", "numpy", "argmax", "argmin", "detach_"})


def backward_names(node: ast.AST) -> set[str]:
    """Names in the receiver of ``.backward()``: ``loss``, ``scaler.scale(loss)``, ``(a + b) / n``."""
    if isinstance(node, ast.Name):
        return {node.id}
    if isinstance(node, ast.Call) and call_name(node) == "scale" and node.args:
        return backward_names(node.args[0])
    if isinstance(node, ast.BinOp):
        return backward_names(node.left) | backward_names(node.right)
    return set()


def loss_names(ctx: FileContext, func: ast.AST | None) -> set[str]:
    """Names ``.backward()`` is called on inside ``func``."""
    key = ("loss", func)
    if key not in ctx.cache:
        names: set[str] = set()
        for call, where in ctx.calls:
            if where.func is func and isinstance(call.func, ast.Attribute) and call.func.attr == "backward":
                recv = call.func.value
                owner = recv.attr if isinstance(recv, ast.Attribute) else getattr(recv, "id", "")
                if call.args and owner.lower().endswith(_BACKWARD_OWNERS):
                    names |= backward_names(call.args[0])  # accelerator.backward(loss)
                else:
                    names |= backward_names(recv)
        ctx.cache[key] = names
    return ctx.cache[key]


def graph_names(ctx: FileContext, func: ast.AST | None) -> set[str]:
    """Names in ``func`` that certainly hold a tensor with an autograd graph (outside no_grad)."""
    key = ("graph", func)
    if key in ctx.cache:
        return ctx.cache[key]
    names = set(loss_names(ctx, func))
    for stmt, where in ctx.stmts:
        if where.func is not func or where.no_grad or not isinstance(stmt, ast.Assign):
            continue
        if len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name):
            if carries_graph(ctx, stmt.value, where, names):
                names.add(stmt.targets[0].id)
    # a name also assigned from a detaching expression somewhere is not certain: drop it
    for stmt, where in ctx.stmts:
        if where.func is func and isinstance(stmt, ast.Assign) and isinstance(stmt.value, ast.Call):
            if call_name(stmt.value) in _DETACHING:
                for target in stmt.targets:
                    if isinstance(target, ast.Name):
                        names.discard(target.id)
    ctx.cache[key] = names
    return names


def carries_graph(ctx: FileContext, expr: ast.AST, where: Where, names: set[str]) -> bool:
    """``model(x)``, ``criterion(out, y)``, ``out.softmax(-1)``, ``outputs.loss``, ``a + b``."""
    if isinstance(expr, ast.Name):
        return expr.id in names
    if isinstance(expr, ast.Attribute):
        return isinstance(expr.value, ast.Name) and expr.value.id in names
    if isinstance(expr, ast.BinOp):
        return carries_graph(ctx, expr.left, where, names) or carries_graph(ctx, expr.right, where, names)
    if isinstance(expr, ast.Call):
        if isinstance(expr.func, (ast.Name, ast.Attribute)) and ctx.expr_kind(expr.func, where.func) in (
                "module", "wrapper"):
            return True  # ``model(x)`` and ``self.model(x)``
        if isinstance(expr.func, ast.Attribute) and expr.func.attr in TENSOR_METHODS | {"cpu", "to", "cuda"}:
            if expr.func.attr in ("detach", "long", "int", "bool"):
                return False
            return carries_graph(ctx, expr.func.value, where, names)
    return False
