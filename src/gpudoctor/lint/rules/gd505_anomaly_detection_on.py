"""GD505: autograd anomaly detection left on in a training script."""

from __future__ import annotations

import ast
from collections.abc import Iterator

from gpudoctor.lint.rules.base import Hit
from gpudoctor.lint.scope import FileContext, is_const

CODE = "GD505"
NAME = "anomaly-detection-on"
SEVERITY = "warning"
FIXABLE = False
MESSAGE = (
    "autograd anomaly detection is on: every op records a traceback and backward checks for NaN; "
    "use it to debug only"
)
RATIONALE = (
    "`torch.autograd.set_detect_anomaly(True)` (or `with torch.autograd.detect_anomaly():`) makes"
    " the forward store a Python traceback for every operation and the backward check every "
    "gradient for NaN, synchronising with the GPU; training becomes many times slower. It is the "
    "right tool to find where a NaN appears, and should not stay in a training run. The rule "
    "fires only in files that contain a training step loop. Anomaly detection switched on only in a"
    " branch taken after a finiteness check (`if not math.isfinite(loss):`, `if torch.isnan(loss)"
    ".any():`) is that debugging use, and is left alone."
)
BAD = "torch.autograd.set_detect_anomaly(True)\n"
GOOD = "torch.autograd.set_detect_anomaly(False)\n"
NONFINITE_CHECKS = frozenset({"isfinite", "isnan", "isinf", "isneginf", "isposinf"})
QUALS = frozenset({"torch.autograd.set_detect_anomaly", "torch.autograd.detect_anomaly",
                   "torch.autograd.anomaly_mode.set_detect_anomaly"})


def check(ctx: FileContext) -> Iterator[Hit]:
    if not ctx.step_loops or "anomaly" not in ctx.source:
        return
    debugging = _under_nonfinite_check(ctx.tree)
    for call, _ in ctx.calls:
        qual = ctx.qualname(call.func)
        if qual in QUALS and id(call) not in debugging:
            first = call.args[0] if call.args else None
            mode = first if first is not None else next((k.value for k in call.keywords if k.arg == "mode"), None)
            if qual.endswith("set_detect_anomaly") and not is_const(mode, True):
                continue
            if qual.endswith(".detect_anomaly") and mode is not None and not is_const(mode, True):
                continue
            yield Hit(call)


def _under_nonfinite_check(tree: ast.Module) -> set[int]:
    """Ids of the calls inside an ``if`` whose test checks a value for NaN/inf: the branch that
    runs after a loss went non-finite (or its ``else``) is where anomaly detection debugs it."""
    inside: set[int] = set()
    for node in ast.walk(tree):
        if not isinstance(node, ast.If):
            continue
        checks = any(isinstance(n, ast.Call) and _last_name(n.func) in NONFINITE_CHECKS
                     for n in ast.walk(node.test))
        if checks:
            for stmt in node.body + node.orelse:
                inside.update(id(n) for n in ast.walk(stmt) if isinstance(n, ast.Call))
    return inside


def _last_name(func: ast.AST) -> str | None:
    if isinstance(func, ast.Attribute):
        return func.attr
    return func.id if isinstance(func, ast.Name) else None
