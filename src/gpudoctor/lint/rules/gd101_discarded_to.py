"""GD101: ``x.to(device)`` / ``x.cuda()`` on a tensor whose result is thrown away."""

from __future__ import annotations

import ast
from collections.abc import Iterator

from gpudoctor.lint.rules.base import Hit
from gpudoctor.lint.scope import FileContext

CODE = "GD101"
NAME = "discarded-tensor-to"
SEVERITY = "error"
FIXABLE = True
MESSAGE = "`.to()` on a tensor is not in place and its result is discarded: assign it back"
RATIONALE = (
    "`Tensor.to()`, `.cuda()`, `.cpu()`, `.float()` and friends return a new tensor and leave the"
    " original where it was, unlike `nn.Module.to()`, which moves the parameters in place. A bare"
    " `x.to(device)` statement therefore does nothing and the next line fails with 'Expected all "
    "tensors to be on the same device' or silently computes on the CPU. The rule fires only when "
    "the name is known to hold a tensor (a `torch.*` factory, a tensor method, or a tuple "
    "unpacked from a DataLoader); it stays silent on modules and on names it cannot decide."
)
BAD = "x = torch.randn(8, 3)\nx.to(device)\n"
GOOD = "x = torch.randn(8, 3)\nx = x.to(device)\nmodel.to(device)  # an nn.Module moves in place\n"
METHODS = frozenset({"to", "cuda", "cpu", "float", "half", "double", "bfloat16", "type", "contiguous"})


def check(ctx: FileContext) -> Iterator[Hit]:
    for stmt, where in ctx.stmts:
        if not (isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call)):
            continue
        func = stmt.value.func
        if not (isinstance(func, ast.Attribute) and func.attr in METHODS and isinstance(func.value, ast.Name)):
            continue
        if ctx.kind(func.value, where.func) in ("tensor", "cuda_tensor"):
            name = func.value.id
            yield Hit(stmt.value, f"`{name}.{func.attr}()` on a tensor is not in place and its result is "
                                  f"discarded: write `{name} = {name}.{func.attr}(...)`")
