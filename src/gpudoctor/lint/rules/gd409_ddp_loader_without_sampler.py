"""GD409: under DDP, a training DataLoader without a DistributedSampler."""

from __future__ import annotations

import ast
from collections.abc import Iterator

from gpudoctor.lint.rules.base import Hit
from gpudoctor.lint.scope import FileContext, call_name, has_star_kwargs, kwarg, last_ident

CODE = "GD409"
NAME = "ddp-loader-without-sampler"
SEVERITY = "warning"
FIXABLE = False
MESSAGE = (
    "DDP script trains on a DataLoader without a DistributedSampler: every rank iterates the "
    "whole dataset"
)
RATIONALE = (
    "Under DistributedDataParallel each process builds its own DataLoader. Without "
    "`sampler=DistributedSampler(dataset)` every rank walks the entire dataset, so an epoch does "
    "N times the work (and with a shuffle, ranks see overlapping batches). Pass a "
    "DistributedSampler (and call `set_epoch`). The rule fires only when the file wraps a model "
    "in DDP, never mentions DistributedSampler, and the loader without a sampler is iterated by a"
    " training step loop in the same function; datasets that shard themselves (IterableDataset) "
    "are built differently and are left alone when their class is visible."
)
BAD = ("model = DDP(model, device_ids=[rank])\nloader = DataLoader(train_set, batch_size=64, shuffle=True)\n"
       "for x, y in loader:\n    model(x).sum().backward()\n    optimizer.step()\n")
GOOD = ("model = DDP(model, device_ids=[rank])\nsampler = DistributedSampler(train_set)\n"
        "loader = DataLoader(train_set, batch_size=64, sampler=sampler)\n"
        "for x, y in loader:\n    model(x).sum().backward()\n    optimizer.step()\n")


def _iterated(it: ast.AST) -> str:
    while isinstance(it, ast.Call) and call_name(it) in ("enumerate", "tqdm", "iter") and it.args:
        it = it.args[0]
    return it.id if isinstance(it, ast.Name) else ""


def _dataset_class(ctx: FileContext, node: ast.AST, func: object) -> str:
    """``Shards()`` or ``ds`` with ``ds = Shards()`` -> ``"Shards"``."""
    if isinstance(node, ast.Name):
        values = ctx.assigned(node.id, func)
        node = values[-1] if values else node
    return last_ident(node.func) if isinstance(node, ast.Call) else ""


def check(ctx: FileContext) -> Iterator[Hit]:
    if "DistributedSampler" in ctx.source or "DistributedDataParallel" not in ctx.source:
        return
    if not any((ctx.qualname(c.func) or "").endswith("DistributedDataParallel") for c, _ in ctx.calls):
        return
    iterable: set[str] = set()  # local IterableDataset subclasses: they shard themselves
    for stmt, _ in ctx.stmts:
        if isinstance(stmt, ast.ClassDef) and any(
                (ctx.qualname(b) or "").endswith("IterableDataset") or last_ident(b) in iterable for b in stmt.bases):
            iterable.add(stmt.name)
    loaders: dict[tuple[object, str], ast.Call] = {}
    for stmt, where in ctx.stmts:
        if (isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name)
                and isinstance(stmt.value, ast.Call) and (ctx.qualname(stmt.value.func) or "").endswith("DataLoader")):
            call = stmt.value
            if has_star_kwargs(call) or kwarg(call, "sampler") is not None or kwarg(call, "batch_sampler") is not None:
                continue
            if len(call.args) > 3 or (call.args and _dataset_class(ctx, call.args[0], where.func) in iterable):
                continue
            loaders[(where.func, stmt.targets[0].id)] = call
    for stmt, where in ctx.stmts:
        if isinstance(stmt, (ast.For, ast.AsyncFor)) and stmt in ctx.step_loops:
            call = loaders.pop((where.func, _iterated(stmt.iter)), None)
            if call is not None:
                yield Hit(call)
