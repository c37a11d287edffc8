"""GD104: a DataLoader in GPU code without worker processes or pinned memory."""

from __future__ import annotations

import ast
from collections.abc import Iterator

from gpudoctor.lint.rules.base import Hit
from gpudoctor.lint.scope import FileContext, has_star_kwargs, is_const, kwarg

CODE = "GD104"
NAME = "dataloader-defaults"
SEVERITY = "warning"
FIXABLE = True
MESSAGE = (
    "DataLoader with num_workers=0 or pin_memory=False in GPU code: set num_workers>0 and "
    "pin_memory=True"
)
RATIONALE = (
    "With the defaults (`num_workers=0`, `pin_memory=False`) every batch is decoded and augmented"
    " in the training process while the GPU waits, and copied from pageable memory, which is "
    "about 2.5x slower than pinned memory (21 vs 55 GB/s host-to-device on an H200, DESIGN.md's "
    "measured ceilings): the seeds' symptom is GPU-Util under 50% while a CPU core is at 100%. "
    "`--fix` adds the missing `num_workers=4, pin_memory=True`; tune the worker count with "
    "`gpudoctor tune`. Only files that use CUDA are checked, and a loader built with `**kwargs` "
    "or a non-literal value is left alone; so is the worker count of a loader over a "
    "`TensorDataset` (already in memory) or over a helper's `dataset` parameter. Test modules "
    "(`test_*.py`, `*_test.py`, `conftest.py`) are skipped: their loaders feed a few toy samples to "
    "check behaviour, not throughput."
)
BAD = "loader = DataLoader(train_set, batch_size=64, shuffle=True)\n"
GOOD = "loader = DataLoader(train_set, batch_size=64, shuffle=True, num_workers=8, pin_memory=True)\n"
LOADERS = frozenset({"torch.utils.data.DataLoader", "torch.utils.data.dataloader.DataLoader"})


IN_MEMORY = frozenset({"TensorDataset", "StackDataset"})


def _in_memory(ctx: FileContext | None, call: ast.Call, func: object) -> bool:
    """The dataset is tensors already in memory (``TensorDataset``) or a parameter of a helper
    (``def make_loader(dataset): ...``) whose loading cost cannot be known here."""
    data = call.args[0] if call.args else kwarg(call, "dataset")
    if ctx is None or data is None:
        return False
    if isinstance(data, ast.Name):
        if data.id in ctx.params.get(func, ()):
            return True
        values = ctx.assigned(data.id, func)
        data = values[-1] if len(values) == 1 else data
    return isinstance(data, ast.Call) and (ctx.qualname(data.func) or "").rsplit(".", 1)[-1] in IN_MEMORY


def missing(call: ast.Call, ctx: FileContext | None = None, func: object = None) -> tuple[list[str], list[str]]:
    """(problems to report, keyword arguments ``--fix`` may add)."""
    problems, addable = [], []
    workers = kwarg(call, "num_workers")
    if workers is None and len(call.args) < 6:
        if not _in_memory(ctx, call, func):
            problems.append("num_workers=0 (the default)")
            addable.append("num_workers")
    elif is_const(workers, 0):
        problems.append("num_workers=0")
    pin = kwarg(call, "pin_memory")
    if pin is None and len(call.args) < 8:
        problems.append("pin_memory=False (the default)")
        addable.append("pin_memory")
    elif is_const(pin, False):
        problems.append("pin_memory=False")
    return problems, addable


def check(ctx: FileContext) -> Iterator[Hit]:
    if not ctx.uses_cuda or ctx.is_test:
        return
    for call, where in ctx.calls:
        if ctx.qualname(call.func) not in LOADERS or has_star_kwargs(call):
            continue
        problems, _ = missing(call, ctx, where.func)
        if problems:
            what = " and ".join(problems)
            if any(p.startswith("num_workers") for p in problems):
                yield Hit(call, f"DataLoader with {what} in GPU code: the GPU waits on loading in the "
                                "main process; set num_workers>0 and pin_memory=True")
            else:
                yield Hit(call, f"DataLoader with {what} in GPU code: batches are copied from pageable "
                                "memory (slower, and non_blocking copies cannot overlap); set pin_memory=True")
