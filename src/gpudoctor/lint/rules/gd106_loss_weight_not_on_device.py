"""GD106: a loss module built with a CPU tensor (class weights) and never moved to the device."""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator

from gpudoctor.lint.flow import parents
from gpudoctor.lint.rules.base import Hit
from gpudoctor.lint.scope import FileContext, call_name, is_const, kwarg, last_ident

CODE = "GD106"
NAME = "loss-weight-not-on-device"
SEVERITY = "error"
FIXABLE = False
MESSAGE = (
    "loss module built with a CPU tensor (weight=/pos_weight=) is never moved to the device while "
    "the model is: the first loss call fails with 'Expected all tensors to be on the same device'; "
    "call `criterion.to(device)`"
)
RATIONALE = (
    "A loss module keeps `weight`/`pos_weight` as a buffer on the device the tensor was created "
    "on. `model.to(device)` moves the model only; the loss then mixes CUDA logits with CPU class "
    "weights and raises 'Expected all tensors to be on the same device' (or, on older PyTorch, an "
    "illegal memory access). Create the weight on the device or call `criterion.to(device)`. The "
    "rule fires when the tensor is plainly created on the CPU (a literal list, numpy/sklearn "
    "values, a factory without `device=`), the loss is bound to a name (or an attribute of a class"
    " that is not an `nn.Module`: a module's child moves with it), a model in the file is moved "
    "with `.to(...)`/`.cuda()`, and nothing moves the loss, its weight, or the default device."
)
BAD = ("weights = torch.tensor([1.0, 5.0])\ncriterion = nn.CrossEntropyLoss(weight=weights)\n"
       "model = nn.Linear(3, 2).to(device)\n")
GOOD = ("weights = torch.tensor([1.0, 5.0])\ncriterion = nn.CrossEntropyLoss(weight=weights).to(device)\n"
        "model = nn.Linear(3, 2).to(device)\n")
_LOSSES = frozenset({"CrossEntropyLoss", "NLLLoss", "BCEWithLogitsLoss", "BCELoss", "MultiLabelSoftMarginLoss",
                     "MultiMarginLoss", "NLLLoss2d"})
_MOVES = ("to", "cuda")
_FACTORIES = frozenset({"from_numpy", "ones", "zeros", "full", "arange", "linspace", "empty", "rand", "randn"})
_CPU_VALUES = (ast.List, ast.Tuple, ast.ListComp)
_HANDOFF = re.compile(r"prepare|setup|device|register")


def _cpu_tensor(ctx: FileContext, expr: ast.AST, func: object, depth: int = 0) -> bool:
    """``expr`` is certainly a CPU tensor created here."""
    if depth > 3:
        return False
    if isinstance(expr, ast.Name):
        values = ctx.assigned(expr.id, func)
        return bool(values) and all(_cpu_tensor(ctx, v, func, depth + 1) for v in values)
    if not isinstance(expr, ast.Call):
        return False
    if isinstance(expr.func, ast.Attribute) and expr.func.attr in ("float", "double", "half", "long"):
        return _cpu_tensor(ctx, expr.func.value, func, depth + 1)
    q = ctx.qualname(expr.func) or ""
    head, _, last = q.rpartition(".")
    if head != "torch" or kwarg(expr, "device") is not None:
        return False
    if last in _FACTORIES:
        return True
    if last in ("tensor", "as_tensor", "Tensor", "FloatTensor", "DoubleTensor") and expr.args:
        return _cpu_values(ctx, expr.args[0], func)
    return False


def _cpu_values(ctx: FileContext, arg: ast.AST, func: object) -> bool:
    """Python or numpy values (a literal list, a comprehension, a numpy/sklearn call)."""
    if isinstance(arg, _CPU_VALUES):
        return True
    if isinstance(arg, ast.Call):
        root = (ctx.qualname(arg.func) or "").split(".")[0]
        return root in ("numpy", "sklearn")
    if isinstance(arg, ast.Name):
        values = ctx.assigned(arg.id, func)
        return bool(values) and all(_cpu_values(ctx, v, func) for v in values)
    return False


def _model_moved(ctx: FileContext, loss_names: set[str]) -> bool:
    for call, where in ctx.calls:
        if call_name(call) not in _MOVES or not isinstance(call.func, ast.Attribute):
            continue
        recv = call.func.value
        if last_ident(recv) in loss_names or any(is_const(a, "cpu") for a in call.args):
            continue
        name = last_ident(recv).lower()
        if ctx.expr_kind(recv, where.func) in ("module", "wrapper") or "model" in name or name in ("net", "network"):
            return True
    return False


def _loss_moved(ctx: FileContext, name: str) -> bool:
    for call, _ in ctx.calls:
        if isinstance(call.func, ast.Attribute) and call.func.attr in _MOVES and name in (
                last_ident(call.func.value), last_ident(getattr(call.func.value, "value", None))):
            return True  # ``criterion.to(d)`` / ``criterion.weight.to(d)``
        if (_HANDOFF.search(call_name(call) or "") or call_name(call) in ("ModuleList", "ModuleDict", "Sequential")) \
                and any(last_ident(a) == name for a in call.args):
            return True  # ``accelerator.prepare(model, criterion)``: moved elsewhere
    word = re.escape(name)
    pattern = re.compile(rf"\w\.\w+\s*=\s*(?:self\.)?{word}\s*$|\b{word}\.(?:pos_)?weight\s*=(?!=)", re.MULTILINE)
    return bool(pattern.search(ctx.source))  # ``model.criterion = criterion`` / its weight reassigned


def check(ctx: FileContext) -> Iterator[Hit]:
    if not ctx.uses_gpu or "weight" not in ctx.source or "Loss(" not in ctx.source:
        return
    if "set_default_device" in ctx.source or "set_default_tensor_type" in ctx.source:
        return
    found: list[tuple[ast.Call, str]] = []
    for call, where in ctx.calls:
        q = ctx.qualname(call.func) or ""
        if not (q.startswith("torch.nn.") and q.rsplit(".", 1)[-1] in _LOSSES):
            continue
        weight = kwarg(call, "weight") or kwarg(call, "pos_weight") or (call.args[0] if call.args else None)
        if weight is None or not _cpu_tensor(ctx, weight, where.func):
            continue
        assign = parents(ctx).get(id(call))  # built once per file, only when a weighted loss is there
        if not (isinstance(assign, ast.Assign) and assign.value is call and len(assign.targets) == 1):
            continue  # ``.to(device)`` right away, or handed to something else
        target = assign.targets[0]
        if isinstance(target, ast.Attribute):
            if not (isinstance(target.value, ast.Name) and target.value.id == "self") or where.cls is None \
                    or where.cls.name in ctx.module_classes:
                continue  # a child of an nn.Module moves with it
        elif not isinstance(target, ast.Name):
            continue
        name = last_ident(target)
        if not _loss_moved(ctx, name):
            found.append((call, name))
    if found and _model_moved(ctx, {name for _, name in found}):
        for call, _ in found:
            yield Hit(call)
