"""GD304: a loss with ``reduction='sum'`` in a script that trains under fp16 autocast."""

from __future__ import annotations

from collections.abc import Iterator

from gpudoctor.lint.rules.base import Hit
from gpudoctor.lint.scope import FileContext, call_name, is_const, kwarg

CODE = "GD304"
NAME = "sum-reduction-under-fp16"
SEVERITY = "warning"
FIXABLE = False
MESSAGE = "loss with reduction='sum' under fp16 autocast can overflow (max 65504): use reduction='mean'"
RATIONALE = (
    "float16 tops out at 65504. A summed loss grows with the batch and sequence length, so under "
    "fp16 autocast it (or its scaled gradient) overflows to inf, GradScaler skips step after step"
    " and the loss turns NaN. Use `reduction='mean'` (and rescale the learning rate if needed), "
    "or train in bfloat16. The rule fires only when the file plainly uses fp16: an autocast with "
    "`dtype=torch.float16`, a CUDA autocast without a dtype (fp16 is its default), or an "
    "unconditional GradScaler."
)
BAD = ("criterion = nn.CrossEntropyLoss(reduction=\"sum\")\n"
       "with torch.autocast(\"cuda\", dtype=torch.float16):\n    loss = criterion(model(x), y)\n")
GOOD = ("criterion = nn.CrossEntropyLoss()\n"
        "with torch.autocast(\"cuda\", dtype=torch.float16):\n    loss = criterion(model(x), y)\n")
FP16 = frozenset({"torch.float16", "torch.half"})


def _uses_fp16(ctx: FileContext) -> bool:
    bf16 = any(call_name(c) == "autocast" and ctx.qualname(kwarg(c, "dtype") or c) in ("torch.bfloat16",)
               for c, _ in ctx.calls)
    for call, _ in ctx.calls:
        name = call_name(call)
        if name == "autocast":
            dtype = kwarg(call, "dtype")
            if dtype is not None:
                if ctx.qualname(dtype) in FP16:
                    return True
                continue
            qual = ctx.qualname(call.func) or ""
            device = call.args[0] if call.args else kwarg(call, "device_type")
            if qual.startswith("torch.cuda.amp") or is_const(device, "cuda"):
                return True
        elif name == "GradScaler" and kwarg(call, "enabled") is None and not bf16:
            return True
    return False


def check(ctx: FileContext) -> Iterator[Hit]:
    candidates = [c for c, _ in ctx.calls if is_const(kwarg(c, "reduction"), "sum")]
    if not candidates or not _uses_fp16(ctx):
        return
    for call in candidates:
        if (ctx.qualname(call.func) or "").startswith("torch.nn."):
            yield Hit(call)
