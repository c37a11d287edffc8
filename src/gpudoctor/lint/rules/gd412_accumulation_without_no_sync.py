"""GD412: gradient accumulation on a DDP model without ``no_sync()`` on the non-final micro-steps."""

from __future__ import annotations

import ast
from collections.abc import Iterator

from gpudoctor.lint.rules.base import Hit
from gpudoctor.lint.scope import FileContext
from gpudoctor.lint.training import accumulation_loops, reachable_ddp

CODE = "GD412"
NAME = "ddp-accumulation-without-no-sync"
SEVERITY = "warning"
FIXABLE = False
MESSAGE = (
    "gradient accumulation on a DistributedDataParallel model without `no_sync()`: every micro-step "
    "all-reduces the gradients; wrap the non-final micro-steps in `with model.no_sync():`"
)
RATIONALE = (
    "DDP all-reduces every gradient bucket during each `backward()`. When the optimizer steps only"
    " every N micro-steps, N-1 of those all-reduces are wasted: the result is the same, but the "
    "communication is N times what is needed (the seeds measured the step time shrinking by the "
    "communication share once `no_sync()` was added). Run the backward of the non-final "
    "micro-steps inside `with model.no_sync():` (or set `model.require_backward_grad_sync`). The "
    "rule fires only when the model called in the accumulation loop is, in this file, the result "
    "of `DistributedDataParallel(...)` (directly, as `self.<attr>`, or passed to the function), "
    "and the file never mentions `no_sync`, `require_backward_grad_sync` or an accelerate/engine "
    "`accumulate`."
)
BAD = ("model = DDP(net, device_ids=[rank])\nfor i, (x, y) in enumerate(loader):\n"
       "    loss = criterion(model(x), y) / accum\n    loss.backward()\n    if (i + 1) % accum == 0:\n"
       "        optimizer.step()\n        optimizer.zero_grad()\n")
GOOD = ("import contextlib\nmodel = DDP(net, device_ids=[rank])\nfor i, (x, y) in enumerate(loader):\n"
        "    last = (i + 1) % accum == 0\n    with contextlib.nullcontext() if last else model.no_sync():\n"
        "        loss = criterion(model(x), y) / accum\n        loss.backward()\n    if last:\n"
        "        optimizer.step()\n        optimizer.zero_grad()\n")
_HANDLED = ("no_sync", "require_backward_grad_sync", "accumulate(", "set_requires_gradient_sync")


def _called_models(ctx: FileContext, loop: ast.AST) -> list[tuple[ast.AST, object, ast.Call]]:
    """(callee, function, call) for every call inside ``loop`` whose callee is a name or attribute."""
    return [(call.func, where.func, call) for call, where in ctx.calls
            if loop in where.loops and isinstance(call.func, (ast.Name, ast.Attribute))]


def check(ctx: FileContext) -> Iterator[Hit]:
    if "DistributedDataParallel" not in ctx.source or any(m in ctx.source for m in _HANDLED):
        return
    for acc in accumulation_loops(ctx):
        if any(reachable_ddp(ctx, callee, func, call) for callee, func, call in _called_models(ctx, acc.loop)):
            yield Hit(acc.backward)
