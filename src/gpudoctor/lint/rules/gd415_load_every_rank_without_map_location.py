"""GD415: ``torch.load`` on every rank of a DDP script without ``map_location``."""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator

from gpudoctor.lint.flow import exclusive, parents
from gpudoctor.lint.training import DDP
from gpudoctor.lint.rules.base import Hit
from gpudoctor.lint.scope import FileContext, has_star_kwargs, kwarg

CODE = "GD415"
NAME = "load-every-rank-without-map-location"
SEVERITY = "warning"
FIXABLE = False
MESSAGE = ("`torch.load` without `map_location` in a DDP script puts every rank's copy on the GPU it "
           "was saved from (usually cuda:0): pass `map_location=\"cpu\"` or the rank's device")
RATIONALE = (
    "`torch.load` restores each tensor to the device it was saved from. A checkpoint saved by rank 0 "
    "holds `cuda:0` tensors, so when every process of a DDP job loads it, all of them allocate on "
    "GPU 0: it runs out of memory, or quietly carries N copies and a context per rank. Pass "
    "`map_location=\"cpu\"` (then `load_state_dict` copies into each rank's model) or "
    "`map_location=f\"cuda:{local_rank}\"`. The rule fires in files that start a process group "
    "(`init_process_group`) or wrap in `DistributedDataParallel`, on `torch.load` calls with no "
    "`map_location` (second positional argument or keyword) and no `**kwargs`, unless an enclosing "
    "`if` tests the rank (`if rank == 0:`, `if is_main_process():`). Only loads in the function that "
    "starts the process group or builds the DDP wrapper count (a library helper's callers are not "
    "shown), and a load whose other branch passes `map_location` is a choice, not an oversight."
)
BAD = ("dist.init_process_group(\"nccl\")\nmodel = DDP(Net().cuda(rank), device_ids=[rank])\n"
       "state = torch.load(\"ckpt.pt\")\n")
GOOD = ("dist.init_process_group(\"nccl\")\nmodel = DDP(Net().cuda(rank), device_ids=[rank])\n"
        "state = torch.load(\"ckpt.pt\", map_location=\"cpu\")\n")
_RANK_TEST = re.compile(r"rank|main_process|is_main|master|is_primary|local_process_zero|is_world_process_zero")


def _rank_gated(ctx: FileContext, node: ast.AST) -> bool:
    up = parents(ctx)
    child, parent = node, up.get(id(node))
    while parent is not None:
        if isinstance(parent, (ast.If, ast.IfExp)) and child is not parent.test and _RANK_TEST.search(
                ast.unparse(parent.test)):
            return True
        child, parent = parent, up.get(id(parent))
    return False


def _starts_ddp(ctx: FileContext, call: ast.Call) -> bool:
    name = ctx.qualname(call.func) or ""
    return name.endswith("init_process_group") or name in DDP


def check(ctx: FileContext) -> Iterator[Hit]:
    if "init_process_group" not in ctx.source and "DistributedDataParallel" not in ctx.source:
        return
    ddp_scopes = {where.func for call, where in ctx.calls if _starts_ddp(ctx, call)}
    loads = [(c, w) for c, w in ctx.calls if ctx.qualname(c.func) == "torch.load"]
    for call, where in loads:
        if where.func not in ddp_scopes or len(call.args) >= 2 or has_star_kwargs(call):
            continue  # a library function or helper: where it runs, and on which ranks, is not shown
        if kwarg(call, "map_location") is not None or _rank_gated(ctx, call):
            continue
        if any(kwarg(c, "map_location") is not None and w.func is where.func and exclusive(ctx, c, call)
               for c, w in loads):
            continue  # ``if args.gpu is None: load(p) else: load(p, map_location=loc)``: the branch is chosen
        yield Hit(call)
