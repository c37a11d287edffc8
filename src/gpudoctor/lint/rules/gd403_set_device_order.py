"""GD403: CUDA or NCCL used before ``torch.cuda.set_device``, so every rank works on GPU 0."""

from __future__ import annotations

import ast
from collections.abc import Iterator

from gpudoctor.lint.flow import exclusive
from gpudoctor.lint.rules.base import Hit
from gpudoctor.lint.scope import FileContext, is_cuda_expr, kwarg

CODE = "GD403"
NAME = "set-device-order"
SEVERITY = "warning"
FIXABLE = False
MESSAGE = (
    "call `torch.cuda.set_device(local_rank)` first, before NCCL communicates and before moving "
    "the model"
)
RATIONALE = (
    "Until `torch.cuda.set_device(local_rank)` runs, the current device of every rank is GPU 0. A"
    " `model.cuda()` / `model.to(\"cuda\")` before it puts every rank's model on GPU 0 (the 'fake "
    "multi-GPU' OOM), and a collective (`barrier`, `all_reduce`, `broadcast` ...) or CUDA call "
    "between `init_process_group` and `set_device` makes NCCL bind GPU 0 on every rank or hang in "
    "`ncclCommInitRank`. `init_process_group` alone touches no GPU (NCCL communicators are created"
    " lazily), so the rule fires on it only when something uses CUDA or NCCL before the later "
    "`set_device`. `torch.accelerator.set_device_index` counts as setting the device; calls in the"
    " other arm of an `if` (an NPU or MLU branch) are not compared; `init_process_group("
    "device_id=...)` and moves with an explicit index (`.to(local_rank)`) are fine. Test modules "
    "holding tests, whose process-group setup (a deliberately wrong device included) is what they check, are "
    "skipped."
)
BAD = ("dist.init_process_group(\"nccl\")\ndist.barrier()\nmodel = Net().cuda()\n"
       "torch.cuda.set_device(local_rank)\n")
GOOD = ("torch.cuda.set_device(local_rank)\ndist.init_process_group(\"nccl\")\n"
        "model = Net().cuda()\n")
SETTERS = frozenset({"torch.cuda.set_device", "torch.accelerator.set_device_index"})
COLLECTIVES = frozenset("barrier all_reduce broadcast all_gather all_gather_into_tensor reduce_scatter "
                        "reduce_scatter_tensor reduce scatter gather all_to_all all_gather_object "
                        "broadcast_object_list monitored_barrier send recv".split())
HARMLESS_CUDA = frozenset({"is_available", "device_count", "set_device", "is_initialized", "get_arch_list"})


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


def _touches_gpu(ctx: FileContext, call: ast.Call) -> bool:
    """A collective, a CUDA runtime call or a move to CUDA: binds the current device."""
    qual = ctx.qualname(call.func) or ""
    if qual.startswith("torch.distributed.") and qual.rsplit(".", 1)[-1] in COLLECTIVES:
        return True
    if qual.startswith("torch.cuda.") and qual.count(".") == 2 and qual.rsplit(".", 1)[-1] not in HARMLESS_CUDA:
        return True
    if isinstance(call.func, ast.Attribute) and call.func.attr == "cuda":
        return True
    return isinstance(call.func, ast.Attribute) and call.func.attr == "to" and bool(call.args) and is_cuda_expr(
        call.args[0])


def check(ctx: FileContext) -> Iterator[Hit]:
    if ctx.holds_tests:
        return  # a test's process-group setup (a deliberately wrong device included) is what it checks
    setters: dict[object, list[ast.Call]] = {}
    calls_of: dict[object, list[tuple[ast.Call, object]]] = {}
    for call, where in ctx.calls:
        calls_of.setdefault(where.func, []).append((call, where))
        if ctx.qualname(call.func) in SETTERS:
            setters.setdefault(where.func, []).append(call)
    for func, sets in setters.items():
        calls = calls_of[func]
        for call, where in calls:
            later = [s for s in sets if s.lineno > call.lineno and not exclusive(ctx, s, call)]
            if not later or any(s.lineno <= call.lineno and not exclusive(ctx, s, call) for s in sets):
                continue
            qual = ctx.qualname(call.func) or ""
            if qual.startswith("torch.distributed") and qual.endswith(".init_process_group"):
                if kwarg(call, "device_id") is not None:
                    continue
                end = min(s.lineno for s in later)
                between = [c for c, _ in calls if call.lineno < c.lineno < end and not exclusive(ctx, c, call)]
                if any(_touches_gpu(ctx, c) for c in between):
                    yield Hit(call, "`init_process_group`, then CUDA/NCCL used before `torch.cuda.set_device`:"
                                    " NCCL binds GPU 0 on every rank; call set_device(local_rank) first")
            elif _unindexed_move(call) and ctx.kind(call.func.value, where.func) in ("module", "wrapper"):
                yield Hit(call, "model moved to \"cuda\" before `torch.cuda.set_device`: every rank puts it "
                                "on GPU 0; call set_device(local_rank) first")
