"""GD407: saving the DDP/DataParallel wrapper's ``state_dict``."""

from __future__ import annotations

import ast
from collections.abc import Iterator

from gpudoctor.lint.rules.base import Hit
from gpudoctor.lint.scope import FileContext, call_name

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
    " before the `torch.save` call, also when the state dict goes through a variable or a dict "
    "(`ckpt = {\"model\": model.state_dict()}`) first. A resume checkpoint that the same function "
    "loads back into the wrapper itself (`model.load_state_dict(...)` after wrapping, or a resume "
    "helper given the wrapper: `restart_from_checkpoint(path, state_dict=model)`) round-trips the "
    "prefix and is not reported."
)
BAD = "model = DDP(model, device_ids=[rank])\ntorch.save(model.state_dict(), \"ckpt.pt\")\n"
GOOD = "model = DDP(model, device_ids=[rank])\ntorch.save(model.module.state_dict(), \"ckpt.pt\")\n"


def _last_before(ctx: FileContext, name: str, func: object, line: int) -> ast.AST | None:
    values = [v for v in ctx.assigned(name, func) if getattr(v, "lineno", line) < line]
    return max(values, key=lambda v: v.lineno) if values else None


def _saved(ctx: FileContext, expr: ast.AST, func: object, line: int, depth: int = 0) -> Iterator[ast.AST]:
    """Every node of what is saved, following names a step back: ``sd = model.state_dict()``,
    ``ckpt = {"model": sd}``, ``ckpt["model"] = model.state_dict()``, then ``torch.save(ckpt, p)``."""
    for node in ast.walk(expr):
        yield node
        if isinstance(node, ast.Name) and depth < 3:
            value = _last_before(ctx, node.id, func, line)
            if value is not None:
                yield from _saved(ctx, value, func, line, depth + 1)
            for stmt, where in ctx.stmts:  # ``ckpt["model"] = ...`` item assignments
                if (where.func is func and isinstance(stmt, ast.Assign) and stmt.lineno < line
                        and any(isinstance(t, ast.Subscript) and isinstance(t.value, ast.Name)
                                and t.value.id == node.id for t in stmt.targets)):
                    yield from _saved(ctx, stmt.value, func, line, depth + 1)


_RESUME_WORDS = ("load", "resume", "restart", "restore")


def _takes(call: ast.Call, name: str) -> bool:
    """``name`` is an argument of ``call`` (``restart_from_checkpoint(path, state_dict=model)``)."""
    values = [*call.args, *(k.value for k in call.keywords)]
    return any(isinstance(v, ast.Name) and v.id == name for v in values)


def _loaded_back(ctx: FileContext, name: str, func: object) -> bool:
    """The same function loads a state dict into the wrapper itself (``model.load_state_dict(...)``
    with ``model`` the DDP wrapper there), or hands the wrapper to a resume helper
    (``restart_from_checkpoint(path, state_dict=model)``, ``load_checkpoint(model, path)``): a
    resume checkpoint whose ``module.`` keys round-trip."""
    for call, where in ctx.calls:
        if where.func is not func:
            continue
        into_wrapper = (call_name(call) == "load_state_dict" and isinstance(call.func, ast.Attribute)
                        and isinstance(call.func.value, ast.Name) and call.func.value.id == name)
        helper = any(w in (call_name(call) or "").lower() for w in _RESUME_WORDS) and _takes(call, name)
        if into_wrapper or helper:
            value = _last_before(ctx, name, func, call.lineno + 1)
            if value is not None and ctx.expr_kind(value, func) == "wrapper":
                return True
    return False


def check(ctx: FileContext) -> Iterator[Hit]:
    for call, where in ctx.calls:
        if ctx.qualname(call.func) != "torch.save" or not call.args:
            continue
        for node in _saved(ctx, call.args[0], where.func, call.lineno):
            if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                    and node.func.attr == "state_dict"):
                continue
            owner = node.func.value
            if isinstance(owner, ast.Name):
                value = _last_before(ctx, owner.id, where.func, node.lineno + 1)
                if (value is not None and ctx.expr_kind(value, where.func) == "wrapper"
                        and not _loaded_back(ctx, owner.id, where.func)):
                    yield Hit(node)
            elif ctx.attr_kind(owner, where.func) == "wrapper":  # ``self.model = DDP(...)``
                yield Hit(node)
