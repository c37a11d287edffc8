"""GD303: gradient clipping with a GradScaler but no ``scaler.unscale_()`` before it."""

from __future__ import annotations

import ast
from collections.abc import Iterator

from gpudoctor.lint.rules.base import Hit
from gpudoctor.lint.scope import FileContext, last_ident

CODE = "GD303"
NAME = "clip-without-unscale"
SEVERITY = "error"
FIXABLE = False
MESSAGE = (
    "gradients clipped while still scaled by GradScaler: call `scaler.unscale_(optimizer)` before"
    " clipping"
)
RATIONALE = (
    "With a GradScaler the gradients after `scaler.scale(loss).backward()` are multiplied by the "
    "loss scale (65536 at the start). Clipping them to `max_norm=1.0` then clips gradients that "
    "are 2^16 times too large, which is almost no update at all, and the threshold changes every "
    "time the scale does. Call `scaler.unscale_(optimizer)` first; `scaler.step()` knows they are"
    " unscaled. The rule needs `scaler.scale(...)` in the same function, and stays silent if "
    "`unscale_` is called anywhere earlier in it."
)
BAD = ("scaler.scale(loss).backward()\ntorch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)\n"
       "scaler.step(optimizer)\n")
GOOD = ("scaler.scale(loss).backward()\nscaler.unscale_(optimizer)\n"
        "torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)\nscaler.step(optimizer)\n")
CLIPS = frozenset({"torch.nn.utils.clip_grad_norm_", "torch.nn.utils.clip_grad_value_",
                   "torch.nn.utils.clip_grad.clip_grad_norm_", "torch.nn.utils.clip_grad.clip_grad_value_"})


def check(ctx: FileContext) -> Iterator[Hit]:
    scaled: set[object] = set()
    unscale_lines: dict[object, list[int]] = {}
    for call, where in ctx.calls:
        if isinstance(call.func, ast.Attribute) and call.func.attr in ("scale", "unscale_"):
            recv = call.func.value
            if ctx.kind(recv, where.func) == "scaler" or "scaler" in last_ident(recv).lower():
                if call.func.attr == "scale":
                    scaled.add(where.func)
                else:
                    unscale_lines.setdefault(where.func, []).append(call.lineno)
    for call, where in ctx.calls:
        if where.func in scaled and ctx.qualname(call.func) in CLIPS:
            if not any(line <= call.lineno for line in unscale_lines.get(where.func, ())):
                yield Hit(call)
