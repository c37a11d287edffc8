"""GD403: ``init_process_group`` or a model move before ``torch.cuda.set_device``."""

from __future__ import annotations

import ast
from collections.abc import Iterator

from gpudoctor.lint.rules.base import Hit
from gpudoctor.lint.scope import FileContext, is_cuda_expr, kwarg

CODE = "GD403"
NAME = "set-device-order"
SEVERITY = "warning"
FIXABLE = False
MESSAGE = (
    "call `torch.cuda.set_device(local_rank)` first, before init_process_group and before moving "
    "the model"
)
RATIONALE = (
    "Until `torch.cuda.set_device(local_rank)` runs, the current device of every rank is GPU 0. A"
    " `model.cuda()` / `model.to(\"cuda\")` before it puts every rank's model on GPU 0 (the 'fake "
    "multi-GPU' OOM), and NCCL set up before it may bind GPU 0 on all ranks or hang in "
    "`ncclCommInitRank`. The order is: set_device -> init_process_group -> model.to -> DDP. The "
    "rule compares positions inside one function; `init_process_group(device_id=...)` and moves "
    "with an explicit index (`.to(local_rank)`) are fine."
)
BAD = ("dist.init_process_group(\"nccl\")\nmodel = Net().cuda()\n"
       "torch.cuda.set_device(local_rank)\n")
GOOD = ("torch.cuda.set_device(local_rank)\ndist.init_process_group(\"nccl\")\n"
        "model = Net().cuda()\n")


def _unindexed_move(call: ast.Call) -> bool:
    if not isinstance(call.func, ast.Attribute):
        return False
    if call.func.attr == "cuda":
        return not call.args and not call.keywords
    if call.func.attr == "to" and call.args:
        target = call.args[0]
        if isinstance(target, ast.Call) and target.args:
            target = target.args[0]
        return isinstance(target, ast.Constant) and target.value == "cuda" and is_cuda_expr(call.args[0])
    return False


def check(ctx: FileContext) -> Iterator[Hit]:
    first_set: dict[object, int] = {}
    for call, where in ctx.calls:
        if ctx.qualname(call.func) == "torch.cuda.set_device":
            first_set[where.func] = min(first_set.get(where.func, call.lineno), call.lineno)
    if not first_set:
        return
    for call, where in ctx.calls:
        line = first_set.get(where.func)
        if line is None or call.lineno >= line:
            continue
        qual = ctx.qualname(call.func) or ""
        if qual.startswith("torch.distributed") and qual.endswith(".init_process_group"):
            if kwarg(call, "device_id") is None:
                yield Hit(call, "`init_process_group` before `torch.cuda.set_device`: NCCL may bind "
                                "GPU 0 on every rank; call set_device(local_rank) first")
        elif _unindexed_move(call) and ctx.kind(call.func.value, where.func) in ("module", "wrapper"):
            yield Hit(call, "model moved to \"cuda\" before `torch.cuda.set_device`: every rank puts it "
                            "on GPU 0; call set_device(local_rank) first")
