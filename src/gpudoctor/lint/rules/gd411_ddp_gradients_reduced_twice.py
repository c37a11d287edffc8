"""GD411: gradients of a DDP-wrapped model all-reduced by hand (DDP already reduced them)."""

from __future__ import annotations

import ast
from collections.abc import Iterator

from gpudoctor.lint.rules.base import Hit
from gpudoctor.lint.scope import FileContext, call_name
from gpudoctor.lint.training import reachable_ddp

CODE = "GD411"
NAME = "ddp-gradients-reduced-twice"
SEVERITY = "error"
FIXABLE = False
MESSAGE = (
    "`dist.all_reduce` of `param.grad` on a DistributedDataParallel model: DDP already averaged the "
    "gradients during backward; remove the manual all-reduce"
)
RATIONALE = (
    "DistributedDataParallel all-reduces (averages) every gradient bucket while `backward()` runs."
    " Reducing `param.grad` again by hand sums the already-averaged gradients over the ranks: with "
    "`op=SUM` they are world_size times too large, and even when divided afterwards the step pays "
    "for a second full all-reduce of the model. The rule fires when the reduced tensor is "
    "`p.grad` (or a buffer built from them) of parameters taken from a model that is, in this file, "
    "the result of `DistributedDataParallel(...)` (directly, as `self.<attr>`, through `.module`, "
    "or passed to a helper); files using `no_sync()` (where a manual reduction can be right) and "
    "code in another branch than the DDP wrapping are left alone."
)
BAD = ("model = DDP(net, device_ids=[rank])\nloss.backward()\nfor p in model.parameters():\n"
       "    dist.all_reduce(p.grad, op=dist.ReduceOp.SUM)\n    p.grad /= dist.get_world_size()\n"
       "optimizer.step()\n")
GOOD = "model = DDP(net, device_ids=[rank])\nloss.backward()\noptimizer.step()\n"
_PARAM_ITERS = ("parameters", "named_parameters")


def _grad_bases(node: ast.AST) -> list[str]:
    """Names whose ``.grad`` the expression reads: ``p.grad``, ``p.grad.data``, ``[p.grad for p in ...]``."""
    return [n.value.id for n in ast.walk(node)
            if isinstance(n, ast.Attribute) and n.attr == "grad" and isinstance(n.value, ast.Name)]


def _model_of_iter(ctx: FileContext, it: ast.AST, func: object, depth: int = 0) -> ast.AST | None:
    """``M.parameters()`` -> M; a name assigned ``[p for p in M.parameters() if ...]`` -> M."""
    while isinstance(it, ast.Call) and call_name(it) in ("list", "filter", "enumerate", "tuple") and it.args:
        it = it.args[-1]
    if isinstance(it, ast.Call) and isinstance(it.func, ast.Attribute) and it.func.attr in _PARAM_ITERS:
        return it.func.value
    if isinstance(it, (ast.ListComp, ast.GeneratorExp)) and depth < 2:
        return _model_of_iter(ctx, it.generators[0].iter, func, depth + 1)
    if isinstance(it, ast.Name) and depth < 2:
        values = ctx.assigned(it.id, func)
        if len(values) == 1:
            return _model_of_iter(ctx, values[0], func, depth + 1)
    return None


def _binds(target: ast.AST, name: str) -> bool:
    return any(isinstance(n, ast.Name) and n.id == name for n in ast.walk(target))


def _models(ctx: FileContext, call: ast.Call, where) -> list[ast.AST]:
    arg = call.args[0] if call.args else next((k.value for k in call.keywords if k.arg == "tensor"), None)
    if arg is None:
        return []
    exprs = [arg]
    if isinstance(arg, ast.Name):
        exprs += ctx.assigned(arg.id, where.func)
    out = []
    for expr in exprs:
        for base in _grad_bases(expr):
            iters = [loop.iter for loop in where.loops if isinstance(loop, (ast.For, ast.AsyncFor))
                     and _binds(loop.target, base)]
            iters += [g.iter for n in ast.walk(expr) if isinstance(n, (ast.ListComp, ast.GeneratorExp))
                      for g in n.generators if _binds(g.target, base)]
            out += [m for m in (_model_of_iter(ctx, it, where.func) for it in iters) if m is not None]
    return out


def check(ctx: FileContext) -> Iterator[Hit]:
    if "all_reduce" not in ctx.source or "DistributedDataParallel" not in ctx.source or "no_sync" in ctx.source:
        return
    for call, where in ctx.calls:
        if ctx.qualname(call.func) != "torch.distributed.all_reduce":
            continue
        if any(reachable_ddp(ctx, model, where.func, call) for model in _models(ctx, call, where)):
            yield Hit(call)
