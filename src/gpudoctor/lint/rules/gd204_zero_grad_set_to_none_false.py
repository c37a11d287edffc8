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
    "memory allocated between steps. `--fix` removes the argument. A file that writes into `.grad`"
    " in place (`p.grad += g`, `p.grad.add_(g)`, a parameter server) needs the zero tensors and "
    "is left alone. Test modules (`test_*.py`, `*_test.py`, `conftest.py`) are skipped: a CUDA-graph test needs the static "
    "gradient buffers `set_to_none=False` keeps."
)
BAD = "optimizer.zero_grad(set_to_none=False)\n"
GOOD = "optimizer.zero_grad()  # set_to_none=True is the default\n"


def _writes_into_grad(ctx: FileContext) -> bool:
    """``p.grad += g`` / ``p.grad /= n`` / ``p.grad.add_(g)``: the code needs zero tensors, not None."""
    for stmt, _ in ctx.stmts:
        if isinstance(stmt, ast.AugAssign) and isinstance(stmt.target, ast.Attribute) and stmt.target.attr == "grad":
            return True
    return any(isinstance(c.func, ast.Attribute) and c.func.attr.endswith("_") and isinstance(c.func.value, ast.Attribute)
               and c.func.value.attr == "grad" and c.func.attr != "zero_" for c, _ in ctx.calls)


def check(ctx: FileContext) -> Iterator[Hit]:
    if ctx.is_test or "set_to_none" not in ctx.source or _writes_into_grad(ctx):  # a CUDA-graph test needs them
        return
    for call, _ in ctx.calls:
        if isinstance(call.func, ast.Attribute) and call.func.attr == "zero_grad":
            if is_const(kwarg(call, "set_to_none"), False):
                yield Hit(call)
