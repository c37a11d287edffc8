"""GD602: a training loop that steps the optimizer but never clears the gradients."""

from __future__ import annotations

import ast
from collections.abc import Iterator

from gpudoctor.lint.rules.base import Hit
from gpudoctor.lint.scope import FileContext, call_name
from gpudoctor.lint.walker import is_optimizer_step

CODE = "GD602"
NAME = "step-without-zero-grad"
SEVERITY = "error"
FIXABLE = False
MESSAGE = (
    "optimizer stepped in a loop but gradients are never cleared: call `optimizer.zero_grad()` "
    "every step"
)
RATIONALE = (
    "`.backward()` adds into `.grad`. Without `optimizer.zero_grad()` (or `model.zero_grad()`, or"
    " setting `p.grad = None`) each step's gradient includes every previous one, the effective "
    "learning rate grows without bound and the loss diverges. The rule fires only when nothing in"
    " the file clears gradients, the loop calls no helper named like `*grad*`, and the optimizer "
    "is not created inside the loop."
)
BAD = "for x, y in loader:\n    criterion(model(x), y).backward()\n    optimizer.step()\n"
GOOD = ("for x, y in loader:\n    optimizer.zero_grad()\n    criterion(model(x), y).backward()\n"
        "    optimizer.step()\n")
CLEARS = ("zero_grad", "grad = None", "grad.zero_", "grad=None", "set_to_none")


def check(ctx: FileContext) -> Iterator[Hit]:
    if any(marker in ctx.source for marker in CLEARS) or ".backward(" not in ctx.source:
        return
    helpers = {where.loop for call, where in ctx.calls  # ``clear_grads(model)``: cleared elsewhere
               if "grad" in (call_name(call) or "") and not (call_name(call) or "").startswith("clip_grad")}
    for call, where in ctx.calls:
        if where.loop in ctx.step_loops and where.loop not in helpers and is_optimizer_step(call, ctx, where):
            recv = call.func.value
            if isinstance(recv, ast.Name) and any(
                    where.loop.lineno <= getattr(v, "lineno", 0) <= (where.loop.end_lineno or 0)
                    for v in ctx.assigned(recv.id, where.func)):
                continue  # an optimizer built inside the loop takes one step per object: cannot decide
            yield Hit(call)
