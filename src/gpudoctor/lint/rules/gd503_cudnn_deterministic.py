"""GD503: deterministic cuDNN/algorithms switched on in a training script (information)."""

from __future__ import annotations

import ast
from collections.abc import Iterator

from gpudoctor.lint.rules.base import Hit
from gpudoctor.lint.scope import FileContext, is_const

CODE = "GD503"
NAME = "cudnn-deterministic"
SEVERITY = "info"
FIXABLE = False
MESSAGE = "deterministic cuDNN is on: reproducible but slower convolutions; keep it for debugging runs only"
RATIONALE = (
    "`torch.backends.cudnn.deterministic = True` (and `torch.use_deterministic_algorithms(True)`,"
    " or `torch.backends.cudnn.enabled = False`) restrict cuDNN to deterministic kernels, which "
    "are often slower, and disable the autotuner's fastest choices. That is right for a "
    "reproducibility or debugging run, and a cost in a production training run. Reported as "
    "information, only in files that contain a training loop, and not in test modules "
    "(`test_*.py`, `*_test.py`, `conftest.py`): a test that compares numerics is such a "
    "reproducibility run."
)
BAD = "torch.backends.cudnn.deterministic = True\n"
GOOD = "torch.backends.cudnn.benchmark = True  # production run: let cuDNN pick the fastest kernels\n"


def check(ctx: FileContext) -> Iterator[Hit]:
    if ctx.is_test or not ctx.step_loops or ("determinis" not in ctx.source and "cudnn" not in ctx.source):
        return
    for stmt, where in ctx.stmts:
        if where.guarded:
            continue  # behind ``if args.deterministic:``/``if seed is not None:``: the user opts in
        if isinstance(stmt, ast.Assign) and is_const(stmt.value, True):
            if any(ctx.qualname(t) == "torch.backends.cudnn.deterministic" for t in stmt.targets):
                yield Hit(stmt)
        elif isinstance(stmt, ast.Assign) and is_const(stmt.value, False):
            if any(ctx.qualname(t) == "torch.backends.cudnn.enabled" for t in stmt.targets):
                yield Hit(stmt, "cuDNN is disabled: convolutions and RNNs fall back to much slower "
                                "kernels; keep it for debugging runs only")
    for call, where in ctx.calls:
        if where.guarded:
            continue
        if ctx.qualname(call.func) == "torch.use_deterministic_algorithms" and call.args:
            if is_const(call.args[0], True):
                yield Hit(call, "`torch.use_deterministic_algorithms(True)`: reproducible but slower "
                                "kernels; keep it for debugging runs only")
