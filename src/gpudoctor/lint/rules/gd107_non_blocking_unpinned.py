"""GD107: ``.to(device, non_blocking=True)`` on batches from a DataLoader without ``pin_memory=True``."""

from __future__ import annotations

import ast
from collections.abc import Iterator

from gpudoctor.lint.rules.base import Hit
from gpudoctor.lint.scope import FileContext, call_name, has_star_kwargs, is_const, kwarg

CODE = "GD107"
NAME = "non-blocking-from-unpinned"
SEVERITY = "warning"
FIXABLE = False
MESSAGE = ("`non_blocking=True` copy from a DataLoader built without `pin_memory=True` is still "
           "synchronous: pass `pin_memory=True` to the DataLoader")
RATIONALE = (
    "A host-to-device copy can overlap with GPU work only from page-locked (pinned) memory. From "
    "ordinary pageable memory CUDA first stages the data through a pinned buffer and the call "
    "returns only when that is done, so `non_blocking=True` buys nothing and the step still waits "
    "for the copy. `DataLoader(..., pin_memory=True)` hands out batches in pinned memory (a "
    "background thread pins them). The rule fires on `.to(..., non_blocking=True)`/`.cuda(non_blocking="
    "True)` of a loop variable whose loop iterates a DataLoader built in the same file with no "
    "`pin_memory` argument or `pin_memory=False`; a loader that comes from elsewhere, a "
    "`pin_memory` set from a variable, or a `**kwargs` call is left alone."
)
BAD = "loader = DataLoader(ds, batch_size=64, num_workers=4)\nfor x, y in loader:\n    x = x.to(\"cuda\", non_blocking=True)\n"
GOOD = ("loader = DataLoader(ds, batch_size=64, num_workers=4, pin_memory=True)\nfor x, y in loader:\n"
        "    x = x.to(\"cuda\", non_blocking=True)\n")
_LOADERS = frozenset({"torch.utils.data.DataLoader", "torch.utils.data.dataloader.DataLoader"})


def _loop_iter(loop: ast.AST) -> ast.AST | None:
    it = getattr(loop, "iter", None)
    while isinstance(it, ast.Call) and call_name(it) in ("enumerate", "tqdm", "iter") and it.args:
        it = it.args[0]
    return it


def _binds(loop: ast.AST, name: str) -> bool:
    target = getattr(loop, "target", None)
    return target is not None and any(isinstance(n, ast.Name) and n.id == name for n in ast.walk(target))


def _unpinned_loader(ctx: FileContext, it: ast.AST, func: object) -> ast.Call | None:
    if not isinstance(it, ast.Name) or it.id in ctx.params.get(func, ()):
        return None
    values = ctx.assigned(it.id, func)
    if not values or not all(isinstance(v, ast.Call) and ctx.qualname(v.func) in _LOADERS for v in values):
        return None
    for v in values:
        pin = kwarg(v, "pin_memory")
        if has_star_kwargs(v) or (pin is not None and not is_const(pin, False)):
            return None
    return values[0]


def check(ctx: FileContext) -> Iterator[Hit]:
    for call, where in ctx.calls:
        if call_name(call) not in ("to", "cuda") or not is_const(kwarg(call, "non_blocking"), True):
            continue
        recv = call.func.value if isinstance(call.func, ast.Attribute) else None
        while isinstance(recv, ast.Subscript):
            recv = recv.value  # ``batch["image"].to(...)``
        if not isinstance(recv, ast.Name):
            continue
        loop = next((lp for lp in reversed(where.loops) if _binds(lp, recv.id)), None)
        it = _loop_iter(loop) if loop is not None else None
        if it is not None and _unpinned_loader(ctx, it, where.func) is not None:
            yield Hit(call)
