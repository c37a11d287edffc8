"""GD105: OpenCV used in ``Dataset.__getitem__`` with DataLoader workers, its thread pool left on."""

from __future__ import annotations

import ast
from collections.abc import Iterator

from gpudoctor.lint.rules.base import Hit
from gpudoctor.lint.scope import FileContext, call_name, is_const, kwarg

CODE = "GD105"
NAME = "cv2-threads-in-workers"
SEVERITY = "warning"
FIXABLE = False
MESSAGE = (
    "OpenCV called in a Dataset's `__getitem__` while the DataLoader has worker processes and "
    "`cv2.setNumThreads(0)` is never called: call it at import time (or in `worker_init_fn`)"
)
RATIONALE = (
    "OpenCV starts its own thread pool (one thread per core). In each of `num_workers` forked "
    "DataLoader workers that pool multiplies: N workers x cores threads fight for the CPU, and a "
    "pool created before the fork can deadlock or crash the worker ('DataLoader worker ... killed by"
    " signal: Segmentation fault', a bare 'Segmentation fault (core dumped)'), while "
    "`num_workers=0` works. `cv2.setNumThreads(0)` (and `cv2.ocl.setUseOpenCL(False)`) turns the "
    "pool off. The rule fires when `__getitem__` of a Dataset class calls `cv2` (directly, or "
    "through a method of the class or a function of the file), a DataLoader in the same file asks"
    " for workers, and no file of the project calls `cv2.setNumThreads`; a loader with a "
    "`multiprocessing_context` is left alone."
)
BAD = ("import cv2\n\nclass Images(Dataset):\n    def __getitem__(self, i):\n"
       "        return cv2.imread(self.paths[i])\n\nloader = DataLoader(Images(), num_workers=8)\n")
GOOD = ("import cv2\ncv2.setNumThreads(0)\n\nclass Images(Dataset):\n    def __getitem__(self, i):\n"
        "        return cv2.imread(self.paths[i])\n\nloader = DataLoader(Images(), num_workers=8)\n")
_LOADERS = frozenset({"torch.utils.data.DataLoader", "torch.utils.data.dataloader.DataLoader"})


def _uses_cv2(ctx: FileContext, func: ast.AST, funcs: dict[str, list[ast.AST]], depth: int = 0) -> ast.Call | None:
    """The first cv2 call in ``func``, or in a ``self.<method>``/module function it calls."""
    for node in ast.walk(func):
        if isinstance(node, ast.Call):
            if (ctx.qualname(node.func) or "").startswith("cv2."):
                return node
            if depth < 2 and isinstance(node.func, (ast.Name, ast.Attribute)):
                owner = node.func.value if isinstance(node.func, ast.Attribute) else None
                if owner is None or (isinstance(owner, ast.Name) and owner.id == "self"):
                    for target in funcs.get(call_name(node) or "", ()):
                        if target is not func and _uses_cv2(ctx, target, funcs, depth + 1) is not None:
                            return node
    return None


def _has_workers(call: ast.Call) -> bool:
    workers = kwarg(call, "num_workers")
    if workers is None:
        workers = call.args[5] if len(call.args) > 5 else None
    if workers is None or kwarg(call, "multiprocessing_context") is not None:
        return False
    return not (isinstance(workers, ast.Constant) and (is_const(workers, 0) or workers.value is None))


def check(ctx: FileContext) -> Iterator[Hit]:
    if "cv2" not in ctx.imports.values() or "setNumThreads" in ctx.source or ctx.cv2_threads_elsewhere:
        return
    if not any(ctx.qualname(c.func) in _LOADERS and _has_workers(c) for c, _ in ctx.calls):
        return
    funcs: dict[str, list[ast.AST]] = {}
    for stmt, _ in ctx.stmts:
        if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)):
            funcs.setdefault(stmt.name, []).append(stmt)
    for stmt, where in ctx.stmts:
        if not isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)) or stmt.name != "__getitem__":
            continue
        cls = where.cls
        if cls is None or not (cls.name in ctx.dataset_classes or cls.name.endswith("Dataset")):
            continue
        found = _uses_cv2(ctx, stmt, funcs)
        if found is not None:
            yield Hit(found)
