"""Training-loop facts shared by the accumulation and DDP rules (GD205, GD411, GD412, GD603).

- :func:`is_ddp` — does an expression hold a ``DistributedDataParallel``-wrapped model: a name or
  ``self.<attr>`` assigned from ``DDP(...)``, ``<that>.module``, or a function parameter that some
  call site in the file fills with one (one step through a helper);
- :func:`accumulation_loops` — gradient accumulation: ``.backward()`` on every iteration while the
  optimizer steps only under ``if (i + 1) % N == 0``, or backward inside ``for _ in range(N)`` with
  the optimizer stepping after that inner loop.

Everything answers "unknown" (``False`` / nothing) when the code does not show it; rules stay silent.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass

from gpudoctor.lint.flow import exclusive, parents
from gpudoctor.lint.scope import FileContext, Where, call_name
from gpudoctor.lint.walker import is_backward, is_optimizer_step

DDP = frozenset({"torch.nn.parallel.DistributedDataParallel",
                 "torch.nn.parallel.distributed.DistributedDataParallel"})
_FUNCS = (ast.FunctionDef, ast.AsyncFunctionDef)


def is_ddp_call(ctx: FileContext, node: ast.AST) -> bool:
    return isinstance(node, ast.Call) and ctx.qualname(node.func) in DDP


def ddp_sources(ctx: FileContext, expr: ast.AST, func: ast.AST | None, depth: int = 0) -> list[ast.AST]:
    """The ``DDP(...)`` calls (or, through a helper, the call sites) that put a DDP model in ``expr``."""
    if depth > 2:
        return []
    if isinstance(expr, ast.Attribute) and expr.attr == "module":
        return ddp_sources(ctx, expr.value, func, depth)  # ``model.module``: the same parameters
    if is_ddp_call(ctx, expr):
        return [expr]
    if isinstance(expr, ast.Attribute) and isinstance(expr.value, ast.Name) and expr.value.id == "self":
        cls = ctx.func_cls.get(func)
        values = ctx.attr_assigns.get(cls, {}).get(expr.attr, []) if cls is not None else []
        return [v for v, _ in values if is_ddp_call(ctx, v)]
    if not isinstance(expr, ast.Name):
        return []
    if func is not None and expr.id in ctx.params.get(func, ()) and isinstance(func, _FUNCS):
        local = ctx.assigns.get(func, {}).get(expr.id, [])  # a parameter: never the module-level name
        return [v for v in local if is_ddp_call(ctx, v)] + _from_call_sites(ctx, func, expr.id, depth)
    return [v for v in ctx.assigned(expr.id, func) if is_ddp_call(ctx, v)]


def _from_call_sites(ctx: FileContext, func: ast.FunctionDef, param: str, depth: int) -> list[ast.AST]:
    """Call sites of ``func`` (by name, ``f(...)`` or ``self.f(...)``) passing a DDP model as ``param``."""
    names = [a.arg for a in func.args.posonlyargs + func.args.args]
    method = func in ctx.func_cls
    position = names.index(param) - (1 if method and names and names[0] == "self" else 0) \
        if param in names else None
    out: list[ast.AST] = []
    for call, where in ctx.calls:
        if call_name(call) != func.name or call is func:
            continue
        arg = next((k.value for k in call.keywords if k.arg == param), None)
        if arg is None and position is not None and 0 <= position < len(call.args):
            arg = call.args[position]
        if arg is not None and ddp_sources(ctx, arg, where.func, depth + 1):
            out.append(call)
    return out


def reachable_ddp(ctx: FileContext, expr: ast.AST, func: ast.AST | None, use: ast.AST) -> bool:
    """``expr`` holds a DDP model at ``use``: some source is not in another arm of an ``if`` than ``use``."""
    for source in ddp_sources(ctx, expr, func):
        if not exclusive(ctx, source, use):
            return True
    return False


@dataclass(frozen=True)
class Accumulation:
    """One accumulation loop: the unconditional backward, the deferred optimizer step, and the
    expression that counts micro-steps (the ``N`` of ``% N`` or ``range(N)``)."""

    loop: ast.AST
    backward: ast.Call
    backward_where: Where
    step: ast.Call
    count: ast.AST


def _modulo(test: ast.AST) -> ast.AST | None:
    for node in ast.walk(test):
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mod):
            if not (isinstance(node.right, ast.Constant) and node.right.value in (0, 1)):
                if not isinstance(node.left, (ast.Constant, ast.JoinedStr)):  # not "%d" % x
                    return node.right
    return None


def _range_count(loop: ast.AST) -> ast.AST | None:
    it = getattr(loop, "iter", None)
    if isinstance(it, ast.Call) and call_name(it) == "range" and len(it.args) == 1 and not it.keywords:
        count = it.args[0]
        if not (isinstance(count, ast.Constant) and isinstance(count.value, int) and count.value <= 1):
            return count
    return None


def accumulation_loops(ctx: FileContext) -> list[Accumulation]:
    """Every accumulation loop of the file (computed once)."""
    if "accumulation" in ctx.cache:
        return ctx.cache["accumulation"]
    out: list[Accumulation] = []
    backwards: dict[ast.AST, list[tuple[ast.Call, Where]]] = {}
    steps: dict[ast.AST, list[tuple[ast.Call, Where]]] = {}
    for call, where in ctx.calls:
        if where.loop is None:
            continue
        if is_backward(call) and not where.guarded:
            backwards.setdefault(where.loop, []).append((call, where))
        elif is_optimizer_step(call, ctx, where):
            for loop in where.loops:
                steps.setdefault(loop, []).append((call, where))
    for loop, found in backwards.items():
        backward, bwhere = found[0]
        in_loop = [(c, w) for c, w in steps.get(loop, ()) if w.loop is loop]
        if in_loop and not any(not w.guarded for _, w in in_loop):  # the ``% N`` form
            step, _ = in_loop[0]
            up = parents(ctx)  # built once per file, only when a loop steps conditionally
            node, count = up.get(id(step)), None
            while node is not None and node is not loop and count is None:
                if isinstance(node, ast.If):
                    count = _modulo(node.test)
                node = up.get(id(node))
            if count is not None:
                out.append(Accumulation(loop, backward, bwhere, step, count))
            continue
        count = _range_count(loop)
        if count is None or steps.get(loop) or len(bwhere.loops) < 2:
            continue
        outer = bwhere.loops[-2]  # the ``for _ in range(N)`` form: step after the inner loop
        after = [(c, w) for c, w in steps.get(outer, ()) if w.loop is outer and c.lineno > (loop.end_lineno or 0)]
        if after:
            out.append(Accumulation(loop, backward, bwhere, after[0][0], count))
    ctx.cache["accumulation"] = out
    return out
