"""GD204: ``zero_grad(set_to_none=False)``."""

from __future__ import annotations

import ast
from collections.abc import Iterator

from gpudoctor.lint.rules.base import Hit
from gpudoctor.lint.scope import FileContext, is_const, kwarg

CODE = "GD204"
NAME = "zero-grad-set-to-none-false"
SEVERITY = "warning"
FIXABLE = True
MESSAGE = "`zero_grad(set_to_none=False)` writes zeros into every gradient each step: drop the argument"
RATIONALE = (
    "Since PyTorch 2.0 `zero_grad()` sets gradients to `None`, which frees their memory until the"
    " next backward and skips a memset kernel per parameter; the next backward then writes "
    "instead of accumulating. `set_to_none=False` brings back the memset and keeps the gradient "
    "memory allocated between steps. `--fix` removes the argument."
)
BAD = "optimizer.zero_grad(set_to_none=False)\n"
GOOD = "optimizer.zero_grad()  # set_to_none=True is the default\n"


def check(ctx: FileContext) -> Iterator[Hit]:
    for call, _ in ctx.calls:
        if isinstance(call.func, ast.Attribute) and call.func.attr == "zero_grad":
            if is_const(kwarg(call, "set_to_none"), False):
                yield Hit(call)
