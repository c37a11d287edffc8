"""GD401: ``nn.DataParallel``."""

from __future__ import annotations

from collections.abc import Iterator

from gpudoctor.lint.rules.base import Hit
from gpudoctor.lint.scope import FileContext

CODE = "GD401"
NAME = "data-parallel"
SEVERITY = "warning"
FIXABLE = False
MESSAGE = (
    "`nn.DataParallel` is single-process and slower than DDP: use DistributedDataParallel under "
    "torchrun"
)
RATIONALE = (
    "DataParallel runs one Python process that scatters each batch, replicates the model on every"
    " step and gathers outputs on GPU 0, so GPU 0 carries more memory and work, the GIL "
    "serialises the replicas, and two GPUs are often slower than one. PyTorch recommends "
    "DistributedDataParallel (one process per GPU, launched with `torchrun --nproc_per_node=N`). Only files that train (call `.backward()`) are checked: for "
    "inference the replacement is one process per GPU on a shard of the data, not DDP. Test "
    "modules (`test_*.py`, `*_test.py`) are skipped: a test that wraps a model in DataParallel "
    "checks that the code handles the wrapper, it does not train with it."
)
BAD = "model = nn.DataParallel(model)\n"
GOOD = "model = DDP(model.to(local_rank), device_ids=[local_rank])\n"
QUALS = frozenset({"torch.nn.DataParallel", "torch.nn.parallel.DataParallel",
                   "torch.nn.parallel.data_parallel.DataParallel"})


def check(ctx: FileContext) -> Iterator[Hit]:
    if ctx.is_test:
        return  # a test exercising code that must accept a DataParallel model
    if ".backward(" not in ctx.source and not ctx.step_loops:
        return  # inference or evaluation only: DDP (a gradient reducer) is not the replacement
    for call, _ in ctx.calls:
        if ctx.qualname(call.func) in QUALS:
            yield Hit(call)
