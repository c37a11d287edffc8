"""GD405: a shuffling DistributedSampler whose ``set_epoch`` is never called."""

from __future__ import annotations

import ast
from collections.abc import Iterator

from gpudoctor.lint.rules.base import Hit
from gpudoctor.lint.scope import FileContext, call_name, is_const, kwarg, last_ident

CODE = "GD405"
NAME = "sampler-without-set-epoch"
SEVERITY = "error"
FIXABLE = False
MESSAGE = "DistributedSampler without `sampler.set_epoch(epoch)`: every epoch repeats the same order"
RATIONALE = (
    "DistributedSampler shuffles with a seed derived from its epoch counter, which only "
    "`set_epoch(epoch)` advances. Without it every epoch sees the same permutation on every rank,"
    " which silently hurts convergence. Call `sampler.set_epoch(epoch)` at the top of each epoch."
    " The rule fires only when the loader built from the sampler is iterated inside an outer loop"
    " in the same function and `set_epoch` appears nowhere in the file."
)
BAD = ("sampler = DistributedSampler(ds)\nloader = DataLoader(ds, sampler=sampler)\n"
       "for epoch in range(10):\n    for x, y in loader:\n        step(x, y)\n")
GOOD = ("sampler = DistributedSampler(ds)\nloader = DataLoader(ds, sampler=sampler)\n"
        "for epoch in range(10):\n    sampler.set_epoch(epoch)\n    for x, y in loader:\n        step(x, y)\n")


def _is_sampler(ctx: FileContext, node: ast.AST) -> bool:
    return (isinstance(node, ast.Call) and call_name(node) == "DistributedSampler"
            and not is_const(kwarg(node, "shuffle"), False))


def _iterated(it: ast.AST) -> str:
    while isinstance(it, ast.Call) and call_name(it) in ("enumerate", "tqdm", "iter") and it.args:
        it = it.args[0]
    return last_ident(it) if isinstance(it, ast.Name) else ""


def check(ctx: FileContext) -> Iterator[Hit]:
    if "set_epoch" in ctx.source or "DistributedSampler" not in ctx.source:
        return
    loaders: dict[tuple[object, str], ast.Call] = {}  # (function, loader name) -> sampler call
    for stmt, where in ctx.stmts:
        if not (isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name)):
            continue
        value = stmt.value
        if isinstance(value, ast.Call) and call_name(value) == "DataLoader":
            sampler = kwarg(value, "sampler")
            if isinstance(sampler, ast.Name):
                made = [v for v in ctx.assigned(sampler.id, where.func) if _is_sampler(ctx, v)]
                sampler = made[0] if made else None
            if sampler is not None and _is_sampler(ctx, sampler):
                loaders[(where.func, stmt.targets[0].id)] = sampler
    reported: set[int] = set()
    for stmt, where in ctx.stmts:
        if isinstance(stmt, (ast.For, ast.AsyncFor)) and where.loops:
            sampler = loaders.get((where.func, _iterated(stmt.iter)))
            if sampler is not None and id(sampler) not in reported:
                reported.add(id(sampler))
                yield Hit(sampler)
