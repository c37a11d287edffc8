"""GD505: autograd anomaly detection left on in a training script."""

from __future__ import annotations

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
    "fires only in files that contain a training step loop."
)
BAD = "torch.autograd.set_detect_anomaly(True)\n"
GOOD = "torch.autograd.set_detect_anomaly(False)\n"
QUALS = frozenset({"torch.autograd.set_detect_anomaly", "torch.autograd.detect_anomaly",
                   "torch.autograd.anomaly_mode.set_detect_anomaly"})


def check(ctx: FileContext) -> Iterator[Hit]:
    if not ctx.step_loops or "anomaly" not in ctx.source:
        return
    for call, _ in ctx.calls:
        qual = ctx.qualname(call.func)
        if qual in QUALS:
            first = call.args[0] if call.args else None
            mode = first if first is not None else next((k.value for k in call.keywords if k.arg == "mode"), None)
            if qual.endswith("set_detect_anomaly") and not is_const(mode, True):
                continue
            if qual.endswith(".detect_anomaly") and mode is not None and not is_const(mode, True):
                continue
            yield Hit(call)
