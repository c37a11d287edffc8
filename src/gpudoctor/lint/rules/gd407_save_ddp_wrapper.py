"""GD407: saving the DDP/DataParallel wrapper's ``state_dict``."""

from __future__ import annotations

import ast
from collections.abc import Iterator

from gpudoctor.lint.rules.base import Hit
from gpudoctor.lint.scope import FileContext

CODE = "GD407"
NAME = "save-ddp-wrapper"
SEVERITY = "warning"
FIXABLE = False
MESSAGE = (
    "saving the DDP/DataParallel wrapper's state_dict prefixes every key with `module.`: save "
    "`model.module.state_dict()`"
)
RATIONALE = (
    "`DistributedDataParallel(model).state_dict()` names every parameter `module.<name>`, so the "
    "checkpoint no longer loads into a plain model ('Missing key(s) in state_dict ... Unexpected "
    "key(s): module.conv1.weight'). Save the inner model, `ddp_model.module.state_dict()`, from "
    "rank 0 only. The rule fires when the saved name was last assigned a DDP/DataParallel wrapper"
    " before the `torch.save` call."
)
BAD = "model = DDP(model, device_ids=[rank])\ntorch.save(model.state_dict(), \"ckpt.pt\")\n"
GOOD = "model = DDP(model, device_ids=[rank])\ntorch.save(model.module.state_dict(), \"ckpt.pt\")\n"


def _last_before(ctx: FileContext, name: str, func: object, line: int) -> ast.AST | None:
    values = [v for v in ctx.assigned(name, func) if getattr(v, "lineno", line) < line]
    return max(values, key=lambda v: v.lineno) if values else None


def check(ctx: FileContext) -> Iterator[Hit]:
    for call, where in ctx.calls:
        if ctx.qualname(call.func) != "torch.save" or not call.args:
            continue
        for node in ast.walk(call.args[0]):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                    and node.func.attr == "state_dict" and isinstance(node.func.value, ast.Name)):
                value = _last_before(ctx, node.func.value.id, where.func, call.lineno)
                if value is not None and ctx.expr_kind(value, where.func) == "wrapper":
                    yield Hit(node)
