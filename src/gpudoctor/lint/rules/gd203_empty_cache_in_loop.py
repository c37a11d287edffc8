"""GD203: ``torch.cuda.empty_cache()`` on every training step."""

from __future__ import annotations

from collections.abc import Iterator

from gpudoctor.lint.calls import body_calls, resolve
from gpudoctor.lint.rules.base import Hit
from gpudoctor.lint.scope import FileContext

CODE = "GD203"
NAME = "empty-cache-in-loop"
SEVERITY = "warning"
FIXABLE = False
MESSAGE = "`torch.cuda.empty_cache()` on every training step slows training and does not fix OOM: remove it"
RATIONALE = (
    "`empty_cache()` returns the caching allocator's free blocks to the driver, so the next step "
    "must `cudaMalloc` them again, a synchronising call, on every step. It frees no memory that "
    "tensors still use, so it neither fixes a leak nor lowers the peak. Call it, if at all, "
    "between phases (after evaluation, before loading another model) or when handling an OOM. "
    "Calls under an `if` or in an `except` handler are left alone. A project helper called on "
    "every step that itself calls `empty_cache()` unconditionally (`free_memory()` in `utils.py`) "
    "is reported at the call, naming the helper's place."
)
BAD = "for x, y in loader:\n    loss = step(x, y)\n    loss.backward()\n    torch.cuda.empty_cache()\n"
GOOD = ("for x, y in loader:\n    try:\n        loss = step(x, y)\n        loss.backward()\n"
        "    except torch.cuda.OutOfMemoryError:\n        torch.cuda.empty_cache()\n")


def check(ctx: FileContext) -> Iterator[Hit]:
    for call, where in ctx.calls:
        if where.loop in ctx.step_loops and not where.guarded:
            if ctx.qualname(call.func) == "torch.cuda.empty_cache":
                yield Hit(call)
            elif (callee := resolve(ctx, call, where)) is not None and _empties(callee):
                yield Hit(call, f"`{callee.func.name}()` ({callee.where()}) calls `torch.cuda.empty_cache()` "
                                "and runs on every training step: slows training and does not fix OOM; remove it")


def _empties(callee) -> bool:
    return any(not w.guarded and w.loop is None and callee.ctx.qualname(c.func) == "torch.cuda.empty_cache"
               for c, w in body_calls(callee))
