"""GD303: gradient clipping with a GradScaler but no ``scaler.unscale_()`` before it."""

from __future__ import annotations

import ast
from collections.abc import Iterator

from gpudoctor.lint.flow import exclusive
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
    " unscaled. The rule needs `scaler.scale(...)` earlier in the same function on a path that can "
    "reach the clip (not the other arm of `if use_amp: ... else: ...`), and stays silent if "
    "`unscale_` is called anywhere earlier in it."
)
BAD = ("scaler.scale(loss).backward()\ntorch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)\n"
       "scaler.step(optimizer)\n")
GOOD = ("scaler.scale(loss).backward()\nscaler.unscale_(optimizer)\n"
        "torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)\nscaler.step(optimizer)\n")
CLIPS = frozenset({"torch.nn.utils.clip_grad_norm_", "torch.nn.utils.clip_grad_value_",
                   "torch.nn.utils.clip_grad.clip_grad_norm_", "torch.nn.utils.clip_grad.clip_grad_value_"})


def check(ctx: FileContext) -> Iterator[Hit]:
    scales: dict[object, list[ast.Call]] = {}
    unscales: dict[object, list[ast.Call]] = {}
    for call, where in ctx.calls:
        if isinstance(call.func, ast.Attribute) and call.func.attr in ("scale", "unscale_"):
            recv = call.func.value
            if ctx.kind(recv, where.func) == "scaler" or "scaler" in last_ident(recv).lower():
                (scales if call.func.attr == "scale" else unscales).setdefault(where.func, []).append(call)
    for call, where in ctx.calls:
        if where.func not in scales or ctx.qualname(call.func) not in CLIPS:
            continue
        # branch-aware: the scaled backward must be able to run in the same pass as the clip
        # (``if use_amp: scaler.scale(loss).backward() ... else: loss.backward(); clip(...)``)
        if not any(s.lineno <= call.lineno and not exclusive(ctx, s, call) for s in scales[where.func]):
            continue
        if not any(u.lineno <= call.lineno for u in unscales.get(where.func, ())):
            yield Hit(call)
