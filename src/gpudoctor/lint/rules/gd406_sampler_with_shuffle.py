"""GD406: a DataLoader given both a sampler and ``shuffle=True``."""

from __future__ import annotations

import ast
from collections.abc import Iterator

from gpudoctor.lint.rules.base import Hit
from gpudoctor.lint.scope import FileContext, is_const, kwarg

CODE = "GD406"
NAME = "sampler-with-shuffle"
SEVERITY = "error"
FIXABLE = False
MESSAGE = (
    "DataLoader with a sampler and shuffle=True raises ValueError: let the sampler shuffle (drop "
    "shuffle=True)"
)
RATIONALE = (
    "`sampler` and `shuffle=True` are mutually exclusive: DataLoader raises 'sampler option is "
    "mutually exclusive with shuffle'. With a DistributedSampler, pass `shuffle=True` to the "
    "sampler and leave the DataLoader's `shuffle` unset. A sampler variable that may be `None` "
    "(`sampler = DistributedSampler(ds) if ddp else None`) is left alone."
)
BAD = "loader = DataLoader(ds, sampler=DistributedSampler(ds), shuffle=True)\n"
GOOD = ("sampler = DistributedSampler(ds) if ddp else None\n"
        "loader = DataLoader(ds, sampler=sampler, shuffle=(sampler is None))\n")


def _never_none(ctx: FileContext, node: ast.AST, func: object) -> bool:
    if isinstance(node, ast.Call):
        return True
    if isinstance(node, ast.Name):
        values = ctx.assigned(node.id, func)
        return bool(values) and all(isinstance(v, ast.Call) for v in values)
    return False


def check(ctx: FileContext) -> Iterator[Hit]:
    for call, where in ctx.calls:
        if not is_const(kwarg(call, "shuffle"), True):
            continue
        q = ctx.qualname(call.func) or ""
        if not q.endswith("DataLoader"):
            continue
        for name in ("sampler", "batch_sampler"):
            value = kwarg(call, name)
            if value is not None and _never_none(ctx, value, where.func):
                yield Hit(call, f"DataLoader with {name}= and shuffle=True raises ValueError: let the "
                                "sampler shuffle (drop shuffle=True)")
                break
