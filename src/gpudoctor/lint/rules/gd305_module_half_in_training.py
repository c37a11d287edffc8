"""GD305: a model converted to fp16 with ``.half()`` and then trained."""

from __future__ import annotations

import ast
from collections.abc import Iterator

from gpudoctor.lint.rules.base import Hit
from gpudoctor.lint.scope import FileContext

CODE = "GD305"
NAME = "module-half-in-training"
SEVERITY = "warning"
FIXABLE = False
MESSAGE = (
    "model converted with `.half()` in a training script: pure fp16 weights lose small updates "
    "and overflow; use autocast (+ GradScaler)"
)
RATIONALE = (
    "`model.half()` stores the weights, gradients and optimizer updates in float16. Updates "
    "smaller than fp16's resolution round to zero, BatchNorm statistics drift, and gradients "
    "overflow to inf, so the loss stalls or turns NaN. Mixed precision keeps fp32 master weights:"
    " leave the model in fp32 and wrap the forward in `torch.autocast(\"cuda\", "
    "dtype=torch.bfloat16)` (or fp16 with `torch.amp.GradScaler`). The rule fires on `.half()` of"
    " a known module in a file that trains (has a step loop); inference scripts are left alone."
    " Test modules (`test_*.py`, `*_test.py`, `conftest.py`) are skipped: they compare fp16 kernels on toy inputs."
)
BAD = "model = nn.Linear(10, 2).cuda().half()\nfor x in loader:\n    model(x).sum().backward()\n    optimizer.step()\n"
GOOD = ("model = nn.Linear(10, 2).cuda()\nfor x in loader:\n    with torch.autocast(\"cuda\", dtype=torch.bfloat16):\n"
        "        loss = model(x).sum()\n    loss.backward()\n    optimizer.step()\n")


def check(ctx: FileContext) -> Iterator[Hit]:
    if ctx.is_test or not ctx.step_loops or ".half()" not in ctx.source:  # tests compare fp16 kernels
        return
    for call, where in ctx.calls:
        if isinstance(call.func, ast.Attribute) and call.func.attr == "half" and not call.args:
            if ctx.kind(call.func.value, where.func) in ("module", "wrapper"):
                yield Hit(call)
