"""GD205: an evaluation loop that runs the model without ``torch.no_grad()``/``inference_mode()``."""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator

from gpudoctor.lint.flow import parents
from gpudoctor.lint.rules.base import Hit
from gpudoctor.lint.scope import FileContext, call_name, last_ident
from gpudoctor.lint.walker import is_backward, is_optimizer_step

CODE = "GD205"
NAME = "eval-without-no-grad"
SEVERITY = "warning"
FIXABLE = False
MESSAGE = (
    "evaluation loop runs the model with autograd on: every forward keeps its activations for a "
    "backward that never comes; wrap the loop in `with torch.no_grad():` (or `torch.inference_mode()`)"
)
RATIONALE = (
    "`model.eval()` only switches dropout and batch-norm to inference behaviour; it does not stop "
    "autograd. Without `torch.no_grad()` each forward records its graph and keeps the activations "
    "alive until the outputs are freed, so evaluation uses several times the memory of inference "
    "(the seeds' 'OOM only during validation') and runs slower. The rule fires on a loop that "
    "calls the model in a function that calls `model.eval()` or is named like an evaluation "
    "(`eval*`, `evaluate*`, `validate*`, `val*`, `test*`), when nothing in that function calls "
    "`backward`/steps an optimizer or touches `requires_grad`/`.grad`/`autograd.grad` (gradient-"
    "based evaluation needs autograd), no call site of the function runs under `no_grad`, and the "
    "function is not a Lightning hook (Lightning already disables gradients) or a pytest test."
)
BAD = ("def validate(model, loader):\n    model.eval()\n    total = 0.0\n    for x, y in loader:\n"
       "        total += (model(x).argmax(1) == y).sum().item()\n    return total\n")
GOOD = ("@torch.no_grad()\ndef validate(model, loader):\n    model.eval()\n    total = 0.0\n"
        "    for x, y in loader:\n        total += (model(x).argmax(1) == y).sum().item()\n    return total\n")
_EVAL_DEF = re.compile(r"def\s+(?:eval|evaluat|validat|val|valid|test)(?:\w*)\s*\(")
_EVAL_NAME = re.compile(r"^(?:eval|evaluate|evaluation|validate|validation|val|valid|test)(?:_\w*)?$")
_NEEDS_GRAD = ("requires_grad", ".grad", "autograd", "set_grad_enabled", "enable_grad")
_FUNCS = (ast.FunctionDef, ast.AsyncFunctionDef)
_PLAIN_DECORATORS = frozenset({"staticmethod", "classmethod", "property", "abstractmethod", "wraps", "cache",
                               "lru_cache", "override"})


def _is_test_file(path: str) -> bool:
    name = path.replace("\\", "/").rsplit("/", 1)[-1]
    return name.startswith("test_") or name.endswith("_test.py") or name == "conftest.py"


def _eval_receivers(calls: list[tuple[ast.Call, object]]) -> set[str]:
    """Source text of every ``X`` with ``X.eval()`` called (no arguments: not ``eval(string)``)."""
    return {ast.unparse(c.func.value) for c, _ in calls
            if isinstance(c.func, ast.Attribute) and c.func.attr == "eval" and not c.args and not c.keywords}


def _lightning(cls: ast.ClassDef | None) -> bool:
    return cls is not None and any("Lightning" in ast.unparse(b) for b in cls.bases)


def check(ctx: FileContext) -> Iterator[Hit]:
    if _is_test_file(ctx.path) or not any(v.split(".")[0] == "torch" for v in ctx.imports.values()):
        return
    if ".eval()" not in ctx.source and not _EVAL_DEF.search(ctx.source):
        return  # neither an `.eval()` call nor a function named like an evaluation
    by_func: dict[object, list[tuple[ast.Call, object]]] = {}
    for call, where in ctx.calls:
        by_func.setdefault(where.func, []).append((call, where))
    for func, calls in by_func.items():
        if func is not None and not isinstance(func, _FUNCS):
            continue
        receivers = _eval_receivers(calls)
        named = func is not None and bool(_EVAL_NAME.match(func.name))
        if not receivers and not named:
            continue
        if any(is_backward(c) or is_optimizer_step(c, ctx, w) for c, w in calls):
            continue
        if func is not None:
            lines = ctx.cache.setdefault("lines", ctx.source.splitlines())
            text = "\n".join(lines[func.lineno - 1:func.end_lineno])
        else:
            text = ctx.source
        if any(marker in text for marker in _NEEDS_GRAD):
            continue
        if func is not None and (_lightning(ctx.func_cls.get(func)) or _called_under_no_grad(ctx, func.name)
                                 or any(last_ident(_callee(d)) not in _PLAIN_DECORATORS for d in func.decorator_list)):
            continue  # a decorator of its own (``@smart_inference_mode()``) may turn gradients off
        for call, where in calls:
            if where.loop is None or where.no_grad or not isinstance(call.func, (ast.Name, ast.Attribute)):
                continue
            if _in_grad_context(ctx, call):
                continue
            model = ctx.expr_kind(call.func, where.func) in ("module", "wrapper") or (
                ast.unparse(call.func) in receivers)
            if model:
                yield Hit(call)
                break


def _callee(node: ast.AST) -> ast.AST:
    return node.func if isinstance(node, ast.Call) else node


def _in_grad_context(ctx: FileContext, node: ast.AST) -> bool:
    """Inside ``with <something naming grad or inference>:`` (a project's own no_grad wrapper)."""
    up = parents(ctx)
    parent = up.get(id(node))
    while parent is not None and not isinstance(parent, _FUNCS):
        if isinstance(parent, (ast.With, ast.AsyncWith)) and any(
                word in ast.unparse(item.context_expr).lower() for item in parent.items for word in ("grad", "inference")):
            return True
        parent = up.get(id(parent))
    return False


def _called_under_no_grad(ctx: FileContext, name: str) -> bool:
    """Some call of ``name`` (``f(...)``/``self.f(...)``) runs under ``no_grad``, or it is passed
    around as a value (called from elsewhere): the caller may disable gradients."""
    for call, where in ctx.calls:
        if call_name(call) == name and where.no_grad:
            return True
        if any(isinstance(a, (ast.Name, ast.Attribute)) and last_ident(a) == name for a in call.args):
            return True
    return False
