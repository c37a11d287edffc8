"""GD414: ``torch.nn.utils.clip_grad_norm_`` on an FSDP-sharded model."""

from __future__ import annotations

import ast
from collections.abc import Iterator

from gpudoctor.lint.rules.base import Hit
from gpudoctor.lint.scope import FileContext

CODE = "GD414"
NAME = "fsdp-clip-with-utils"
SEVERITY = "error"
FIXABLE = False
MESSAGE = ("`torch.nn.utils.clip_grad_norm_` on an FSDP model clips by each rank's shard norm: "
           "call `model.clip_grad_norm_(max_norm)`")
RATIONALE = (
    "`FullyShardedDataParallel` keeps only a shard of each gradient on every rank. "
    "`torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)` computes the norm of the local "
    "shard only, so every rank scales its shard by a different factor and the update no longer "
    "matches the unsharded model's (and the returned norm is wrong for logging). "
    "`FullyShardedDataParallel.clip_grad_norm_(max_norm)` all-reduces the norm across ranks first. "
    "The rule fires when the clipped parameters come from a name (or `self.<attr>`) assigned "
    "`FullyShardedDataParallel(...)`; FSDP2's `fully_shard`, whose DTensor gradients the utility "
    "handles, is left alone."
)
_IMPORT = "from torch.distributed.fsdp import FullyShardedDataParallel as FSDP\n"
BAD = _IMPORT + "model = FSDP(model)\ntorch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)\n"
GOOD = _IMPORT + "model = FSDP(model)\nmodel.clip_grad_norm_(1.0)\n"
_FSDP = frozenset({"torch.distributed.fsdp.FullyShardedDataParallel",
                   "torch.distributed.fsdp.fully_sharded_data_parallel.FullyShardedDataParallel"})
_CLIP = frozenset({"torch.nn.utils.clip_grad_norm_", "torch.nn.utils.clip_grad.clip_grad_norm_"})


def _fsdp(ctx: FileContext, expr: ast.AST, func: object) -> bool:
    if isinstance(expr, ast.Name):
        values = ctx.assigned(expr.id, func)
    elif isinstance(expr, ast.Attribute) and isinstance(expr.value, ast.Name) and expr.value.id == "self":
        cls = ctx.func_cls.get(func)
        values = [v for v, _ in ctx.attr_assigns.get(cls, {}).get(expr.attr, [])] if cls is not None else []
    else:
        return False
    return bool(values) and all(isinstance(v, ast.Call) and ctx.qualname(v.func) in _FSDP for v in values)


def check(ctx: FileContext) -> Iterator[Hit]:
    for call, where in ctx.calls:
        if ctx.qualname(call.func) not in _CLIP or not call.args:
            continue
        params = call.args[0]
        if (isinstance(params, ast.Call) and isinstance(params.func, ast.Attribute)
                and params.func.attr == "parameters" and _fsdp(ctx, params.func.value, where.func)):
            yield Hit(call)
