"""GD402: DDP given several ``device_ids``."""

from __future__ import annotations

import ast
from collections.abc import Iterator

from gpudoctor.lint.rules.base import Hit
from gpudoctor.lint.scope import FileContext, kwarg

CODE = "GD402"
NAME = "ddp-several-device-ids"
SEVERITY = "error"
FIXABLE = False
MESSAGE = "DDP with several device_ids: use one process per GPU and `device_ids=[local_rank]`"
RATIONALE = (
    "DistributedDataParallel expects exactly one device per process. Multi-device modules in one "
    "process (`device_ids=[0, 1]`) are no longer supported and raise an error in current PyTorch;"
    " launch one process per GPU with torchrun and pass `device_ids=[local_rank]`."
)
BAD = "model = DDP(model, device_ids=[0, 1])\n"
GOOD = "model = DDP(model, device_ids=[local_rank], output_device=local_rank)\n"
QUALS = frozenset({"torch.nn.parallel.DistributedDataParallel",
                   "torch.nn.parallel.distributed.DistributedDataParallel"})


def check(ctx: FileContext) -> Iterator[Hit]:
    for call, _ in ctx.calls:
        if ctx.qualname(call.func) in QUALS:
            ids = kwarg(call, "device_ids")
            if isinstance(ids, (ast.List, ast.Tuple)) and len(ids.elts) > 1:
                yield Hit(ids)
