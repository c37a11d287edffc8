"""GD408: ``DistributedDataParallel(find_unused_parameters=True)``."""

from __future__ import annotations

from collections.abc import Iterator

from gpudoctor.lint.rules.base import Hit
from gpudoctor.lint.scope import FileContext, is_const, kwarg

CODE = "GD408"
NAME = "find-unused-parameters"
SEVERITY = "info"
FIXABLE = False
MESSAGE = (
    "find_unused_parameters=True traverses the autograd graph every step: enable it only if some "
    "parameters get no gradient"
)
RATIONALE = (
    "With `find_unused_parameters=True` DDP walks the autograd graph after every forward to find "
    "parameters that will get no gradient, which costs time on every step and delays the first "
    "all-reduce bucket. Leave it False (the default) unless the model really skips parameters "
    "(DDP then fails with 'Expected to have finished reduction in the prior iteration'), and in "
    "that case consider making the forward use every parameter or `static_graph=True`."
)
BAD = "model = DDP(model, device_ids=[rank], find_unused_parameters=True)\n"
GOOD = "model = DDP(model, device_ids=[rank])\n"


def check(ctx: FileContext) -> Iterator[Hit]:
    for call, _ in ctx.calls:
        if (ctx.qualname(call.func) or "").endswith("DistributedDataParallel"):
            if is_const(kwarg(call, "find_unused_parameters"), True):
                yield Hit(call)
