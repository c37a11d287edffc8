"""GD102: moving samples to the GPU inside ``Dataset.__getitem__`` or a ``collate_fn``."""

from __future__ import annotations

import ast
from collections.abc import Iterator

from gpudoctor.lint.rules.base import Hit
from gpudoctor.lint.scope import TENSOR_FACTORIES, FileContext, is_cuda_expr, kwarg

CODE = "GD102"
NAME = "cuda-in-dataset"
SEVERITY = "warning"
FIXABLE = False
MESSAGE = (
    "sample moved to the GPU inside a Dataset/collate_fn: return CPU tensors and move the whole "
    "batch in the training loop (pin_memory=True, non_blocking=True)"
)
RATIONALE = (
    "Moving each sample to the GPU in `__getitem__` turns one large host-to-device copy per batch"
    " into dozens of tiny ones, each with a fixed launch cost, so GPU utilisation collapses. With"
    " `num_workers > 0` it is worse: worker processes cannot initialise CUDA after a fork "
    "('Cannot re-initialize CUDA in forked subprocess'), and `pin_memory=True` refuses CUDA "
    "tensors. Build the batch on the CPU and move it once, in the loop. A `.to(x)` whose target "
    "cannot be shown to be CUDA is left alone."
)
BAD = ("class Images(Dataset):\n    def __getitem__(self, i):\n"
       "        return self.images[i].cuda(), self.labels[i]\n")
GOOD = ("class Images(Dataset):\n    def __getitem__(self, i):\n        return self.images[i], self.labels[i]\n\n"
        "for x, y in loader:\n    x = x.to(device, non_blocking=True)\n")
_ITEM_METHODS = frozenset({"__getitem__", "__getitems__", "__iter__"})


def _collate_names(ctx: FileContext) -> set[str]:
    names = {"collate_fn", "collate"}
    for call, _ in ctx.calls:
        value = kwarg(call, "collate_fn")
        if isinstance(value, ast.Name):
            names.add(value.id)
    return names


def _cuda_target(ctx: FileContext, node: ast.AST, func: ast.AST | None) -> bool:
    if is_cuda_expr(node, ctx):
        return True
    if isinstance(node, ast.Name):  # ``device = torch.device("cuda" if ok else "cpu")`` at module level
        values = ctx.assigned(node.id, func) or ctx.assigned(node.id, None)
        return bool(values) and all(any(is_cuda_expr(n, ctx) for n in ast.walk(v)) for v in values)
    return False


def _hits(ctx: FileContext) -> list[tuple[ast.Call, str | None]]:
    """(call that puts a sample on the GPU, the Dataset class it is in, or None in a collate_fn)."""
    key = ("gd102-hits",)
    if key in ctx.cache:
        return ctx.cache[key]
    found: list[tuple[ast.Call, str | None]] = []
    collate = _collate_names(ctx)
    for call, where in ctx.calls:
        func = where.func
        if not isinstance(func, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        in_dataset = func.name in _ITEM_METHODS and where.cls is not None and (
            where.cls.name in ctx.dataset_classes or where.cls.name.endswith("Dataset"))
        if not (in_dataset or func.name in collate):
            continue
        owner = where.cls.name if in_dataset else None
        name = call.func.attr if isinstance(call.func, ast.Attribute) else None
        if name == "cuda" or (name == "to" and call.args and _cuda_target(ctx, call.args[0], func)):
            found.append((call, owner))
        elif name in TENSOR_FACTORIES and is_cuda_expr(kwarg(call, "device") or ast.Constant(None), ctx):
            found.append((call, owner))
    ctx.cache[key] = found
    return found


def cuda_dataset_classes(ctx: FileContext) -> frozenset[str]:
    """Dataset classes of this file whose ``__getitem__``/``__iter__`` put samples on the GPU
    (GD104 leaves their loaders to this rule: pinning CUDA tensors raises)."""
    return frozenset(owner for _, owner in _hits(ctx) if owner is not None)


def check(ctx: FileContext) -> Iterator[Hit]:
    for call, _ in _hits(ctx):
        yield Hit(call)
