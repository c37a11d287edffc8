"""GD302: ``optimizer.step()`` / ``scaler.step()`` / ``scaler.update()`` inside an autocast block."""

from __future__ import annotations

import ast
from collections.abc import Iterator

from gpudoctor.lint.rules.base import Hit
from gpudoctor.lint.scope import FileContext, last_ident
from gpudoctor.lint.walker import is_optimizer_step

CODE = "GD302"
NAME = "step-inside-autocast"
SEVERITY = "warning"
FIXABLE = False
MESSAGE = "optimizer/scaler step inside an autocast block: end the `with autocast` block after the loss"
RATIONALE = (
    "Autocast is meant to wrap the forward pass and the loss only. The optimizer update, "
    "`scaler.step()` and `scaler.update()` should run outside it: ops inside may be cast to lower"
    " precision, and the PyTorch AMP recipe keeps backward and the step out of the region. Close "
    "the `with` block after computing the loss. Test modules (`test_*.py`, `*_test.py`, `conftest.py`) are skipped: a few toy steps "
    "compare optimizers, not a training recipe."
)
BAD = ("with torch.autocast(\"cuda\", dtype=torch.float16):\n    loss = criterion(model(x), y)\n"
       "    scaler.scale(loss).backward()\n    scaler.step(optimizer)\n    scaler.update()\n")
GOOD = ("with torch.autocast(\"cuda\", dtype=torch.float16):\n    loss = criterion(model(x), y)\n"
        "scaler.scale(loss).backward()\nscaler.step(optimizer)\nscaler.update()\n")


def check(ctx: FileContext) -> Iterator[Hit]:
    if ctx.is_test:  # a test steps inside the autocast block it checks, on toy data
        return
    for call, where in ctx.calls:
        if where.autocast is None or not isinstance(call.func, ast.Attribute):
            continue
        is_update = call.func.attr == "update" and "scaler" in last_ident(call.func.value).lower()
        if is_update or is_optimizer_step(call, ctx, where):
            name = last_ident(call.func.value) or "optimizer"
            yield Hit(call, f"`{name}.{call.func.attr}()` inside an autocast block: end the "
                            "`with autocast` block after the loss")
