"""GD104: a DataLoader in GPU code without worker processes or pinned memory."""

from __future__ import annotations

import ast
from collections.abc import Iterator

from gpudoctor.lint.rules.base import Hit
from gpudoctor.lint.rules.gd102_cuda_in_dataset import cuda_dataset_classes
from gpudoctor.lint.scope import TENSOR_FACTORIES, FileContext, call_name, has_star_kwargs, is_const, kwarg

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
    "or a non-literal value is left alone; so is the worker count (default or 0) of a loader over"
    " data already in memory (a `TensorDataset`, or a Dataset class of the file whose "
    "`__getitem__` only indexes what it holds) or over a helper's `dataset` parameter, and the "
    "pinning of a `TensorDataset` whose tensors are not visibly on the CPU (they may already be "
    "on the GPU, where pinning raises; a `torch.stack`/`torch.cat` lies where its inputs lie) or "
    "that holds only `torch.arange`/`torch.randperm` indices (nothing worth pinning). A loader over a Dataset class of the file whose "
    "`__getitem__` already returns CUDA tensors is left to GD102, whose fix comes first (pinning "
    "CUDA tensors raises, and workers cannot initialise CUDA after a fork). A loader whose name is only "
    "ever read as `next(iter(loader))` (one batch for a sample grid) is left alone: there is no "
    "stream of batches to overlap. Nor is a loader over a Dataset class of the file whose `__getitem__` "
    "calls nothing and indexes nothing it holds (the same prompt and the index for every item): "
    "nothing to load, no tensor to pin. A plain list the function builds (`cached = []` then "
    "`cached.append(...)`, or a list literal) is data in memory too: its worker count is left alone "
    "unless the loader's `collate_fn` (a function of the file) reads or decodes (`open`, `load`, "
    "`imread`, a tokenizer, a transform), and its pinning unless every appended item is visibly on "
    "the CPU (`x.cpu()`) or the collate reads files: latents a VAE left on the GPU cannot be pinned. Test modules "
    "(`test_*.py`, `*_test.py`, `conftest.py`) are skipped: their loaders feed a few toy samples to "
    "check behaviour, not throughput. Nor is a loader over constants or indices written in place "
    "(`[0 for _ in range(20)]`, `[0] * 8`, `range(n)`) unless its `collate_fn` loads: a dummy loader "
    "made so `accelerator.prepare` takes a DeepSpeed model is never iterated for data. Nor is a "
    "loader whose Dataset holds only tensors written out as literals in the source "
    "(`X = torch.tensor([[-1.2, 3.1], [-0.9, 2.9]])`, the toy sets of textbooks): a few numbers, "
    "nothing to load in workers or worth pinning."
)
BAD = "loader = DataLoader(train_set, batch_size=64, shuffle=True)\n"
GOOD = "loader = DataLoader(train_set, batch_size=64, shuffle=True, num_workers=8, pin_memory=True)\n"
LOADERS = frozenset({"torch.utils.data.DataLoader", "torch.utils.data.dataloader.DataLoader"})


IN_MEMORY = frozenset({"TensorDataset", "StackDataset"})
# what a ``__getitem__`` that only indexes samples held in memory may call
_CHEAP = frozenset({"type", "long", "int", "float", "half", "bfloat16", "bool", "clone", "len", "tensor",
                    "as_tensor", "from_numpy", "contiguous", "view", "reshape", "squeeze", "unsqueeze"})


def _dataset_expr(ctx: FileContext, call: ast.Call, func: object) -> ast.AST | None:
    data = call.args[0] if call.args else kwarg(call, "dataset")
    if isinstance(data, ast.Name) and data.id not in ctx.params.get(func, ()):
        values = ctx.assigned(data.id, func)
        return values[-1] if len(values) == 1 else data
    return data


def _indexes_held_data(ctx: FileContext, name: str) -> bool:
    """A Dataset class of this file whose ``__getitem__`` only indexes what the object holds
    (``self.samples[i]["input_ids"].long()``): no file, decoder, tokenizer or transform call."""
    key = ("gd104-held", name)
    if key not in ctx.cache:
        getitem = next((f for node in ast.walk(ctx.tree) if isinstance(node, ast.ClassDef) and node.name == name
                        for f in node.body if isinstance(f, ast.FunctionDef) and f.name == "__getitem__"), None)
        nodes = list(ast.walk(getitem)) if getitem is not None else []
        held = any(isinstance(n, ast.Subscript) and isinstance(n.value, ast.Attribute)
                   and isinstance(n.value.value, ast.Name) and n.value.value.id == "self" for n in nodes)
        ctx.cache[key] = held and name in ctx.dataset_classes and all(
            call_name(n) in _CHEAP for n in nodes if isinstance(n, ast.Call))
    return ctx.cache[key]


def _constant_items(ctx: FileContext, call: ast.Call, func: object) -> bool:
    """A Dataset class of this file whose ``__getitem__`` calls nothing and indexes nothing it holds:
    every item is the same held values plus the index (a prompt to sample class images for), so
    there is nothing to load in workers and no per-item tensor to pin."""
    data = _dataset_expr(ctx, call, func)
    if not (isinstance(data, ast.Call) and isinstance(data.func, ast.Name) and data.func.id in ctx.dataset_classes):
        return False
    getitem = next((f for node in ast.walk(ctx.tree) if isinstance(node, ast.ClassDef) and node.name == data.func.id
                    for f in node.body if isinstance(f, ast.FunctionDef) and f.name == "__getitem__"), None)
    return getitem is not None and not any(
        isinstance(n, ast.Call) or (isinstance(n, ast.Subscript) and isinstance(n.ctx, ast.Load)
                                    and _mentions_self_attr(n.value)) for n in ast.walk(getitem))


def _literal_tensor(ctx: FileContext, node: ast.AST, func: object) -> bool:
    """``torch.tensor([[1.0, 2.0], [3.0, 4.0]])`` (also through a name every assignment of which is
    one): numbers written out in the source."""
    if isinstance(node, ast.Name):
        values = ctx.assigned(node.id, func)
        return bool(values) and all(_literal_tensor(ctx, v, func) for v in values)
    if not (isinstance(node, ast.Call) and (ctx.qualname(node.func) or "") in ("torch.tensor", "torch.Tensor")
            and len(node.args) == 1 and isinstance(node.args[0], (ast.List, ast.Tuple))):
        return False
    return all(isinstance(n, (ast.List, ast.Tuple, ast.Constant, ast.UnaryOp, ast.USub, ast.Load))
               for n in ast.walk(node.args[0]))


def _literal_data(ctx: FileContext, call: ast.Call, func: object) -> bool:
    """Every Dataset the loader can get is built from literal tensors only (``ToyDataset(X, y)``
    with ``X = torch.tensor([[...], ...])``): a handful of numbers typed into the source."""
    data = call.args[0] if call.args else kwarg(call, "dataset")
    values = ctx.assigned(data.id, func) if isinstance(data, ast.Name) else [data]
    return bool(values) and all(
        isinstance(v, ast.Call) and bool(v.args) and not v.keywords and all(_literal_tensor(ctx, a, func) for a in v.args)
        for v in values)


def _mentions_self_attr(node: ast.AST) -> bool:
    return any(isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name) and n.value.id == "self"
               for n in ast.walk(node))


_LOADING = ("open", "load", "read", "decode", "imread", "token", "transform", "augment", "resize")


def _list_items(ctx: FileContext, call: ast.Call, func: object) -> list[ast.AST] | None:
    """The items of a plain list the loader iterates, when the list is built here: a literal, or a
    name assigned once to one (``cached = []``) plus what ``cached.append(x)`` adds in the same
    function. ``None`` when the dataset is anything else."""
    data = call.args[0] if call.args else kwarg(call, "dataset")
    if isinstance(data, ast.List):
        return list(data.elts)
    if not (isinstance(data, ast.Name) and data.id not in ctx.params.get(func, ())):
        return None
    values = ctx.assigned(data.id, func)
    if len(values) != 1 or not isinstance(values[0], ast.List):
        return None
    scope = func if func is not None else ctx.tree
    appended = [n.args[0] for n in ast.walk(scope) if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute)
                and n.func.attr == "append" and isinstance(n.func.value, ast.Name) and n.func.value.id == data.id
                and len(n.args) == 1]
    return list(values[0].elts) + appended


def _constants_only(ctx: FileContext, call: ast.Call, func: object) -> bool:
    """The dataset is plain constants or indices written here, with no collate function that
    loads: ``[0 for _ in range(20)]``, ``[0] * 8``, ``range(n)``, ``list(range(n))`` (a dummy
    loader for ``accelerator.prepare``, say): nothing to load in workers, nothing worth pinning."""
    data = _dataset_expr(ctx, call, func)
    if isinstance(data, ast.Call) and call_name(data) == "list" and len(data.args) == 1:
        data = data.args[0]
    if isinstance(data, ast.BinOp) and isinstance(data.op, ast.Mult) and isinstance(data.left, ast.List):
        data = data.left
    if isinstance(data, ast.List):
        constant = bool(data.elts) and all(isinstance(e, ast.Constant) for e in data.elts)
    elif isinstance(data, (ast.ListComp, ast.GeneratorExp)):
        targets = {t.id for g in data.generators if isinstance(g.target, ast.Name) for t in [g.target]}
        constant = all(_is_range(g.iter) and not g.ifs for g in data.generators) and (
            isinstance(data.elt, ast.Constant) or (isinstance(data.elt, ast.Name) and data.elt.id in targets))
    else:
        constant = _is_range(data)
    return constant and not _collate_loads(ctx, call)


def _is_range(node: ast.AST | None) -> bool:
    return isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "range"


def _collate_loads(ctx: FileContext, call: ast.Call) -> bool:
    """The loader's ``collate_fn`` reads or decodes (or is not a function of this file: unknown)."""
    collate = kwarg(call, "collate_fn")
    if collate is None:
        return False
    if not isinstance(collate, ast.Name):
        return True
    body = next((n for n in ast.walk(ctx.tree) if isinstance(n, ast.FunctionDef) and n.name == collate.id), None)
    if body is None:
        return True
    return any(isinstance(n, ast.Call) and any(w in (call_name(n) or "").lower() for w in _LOADING)
               for n in ast.walk(body))


def _in_memory(ctx: FileContext | None, call: ast.Call, func: object) -> bool:
    """The dataset is tensors already in memory (``TensorDataset``, or a class of this file whose
    ``__getitem__`` only indexes what it holds) or a parameter of a helper
    (``def make_loader(dataset): ...``) whose loading cost cannot be known here."""
    data = call.args[0] if call.args else kwarg(call, "dataset")
    if ctx is None or data is None:
        return False
    if isinstance(data, ast.Name) and data.id in ctx.params.get(func, ()):
        return True
    if _list_items(ctx, call, func) is not None:
        return not _collate_loads(ctx, call)
    data = _dataset_expr(ctx, call, func)
    if not isinstance(data, ast.Call):
        return False
    if isinstance(data.func, ast.Name) and _indexes_held_data(ctx, data.func.id):
        return True
    return (ctx.qualname(data.func) or "").rsplit(".", 1)[-1] in IN_MEMORY


def _visibly_cpu(ctx: FileContext, node: ast.AST, func: object) -> bool:
    """``torch.randn(...)`` without ``device=``, ``torch.from_numpy(a)``, ``x.cpu()``."""
    if isinstance(node, ast.Name):
        values = ctx.assigned(node.id, func)
        return len(values) == 1 and _visibly_cpu(ctx, values[0], func)
    if not isinstance(node, ast.Call):
        return False
    if call_name(node) in ("cpu", "numpy"):
        return True
    q = ctx.qualname(node.func) or ""
    last = q.rsplit(".", 1)[-1]
    if q.startswith("torch.") and last in _FOLLOW_INPUTS:  # ``torch.stack([x] * n)``: where x lies
        parts = _sequence_items(node.args[0]) if node.args else None
        return parts is not None and all(_visibly_cpu(ctx, part, func) for part in parts)
    return q.startswith("torch.") and last in TENSOR_FACTORIES and kwarg(node, "device") is None


# joins whose result lies on the device of their inputs, not a fresh CPU tensor
_FOLLOW_INPUTS = frozenset({"stack", "cat", "concat", "concatenate", "hstack", "vstack"})


def _sequence_items(node: ast.AST) -> list[ast.AST] | None:
    """The tensors a ``torch.stack``/``torch.cat`` joins, when written out: ``[a, b]``,
    ``[x] * n``, ``[f(i) for i in ...]`` (its element); None when they cannot be seen."""
    if isinstance(node, (ast.List, ast.Tuple)):
        return list(node.elts)
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mult):
        return _sequence_items(node.left) if isinstance(node.left, (ast.List, ast.Tuple)) else None
    if isinstance(node, (ast.ListComp, ast.GeneratorExp)):
        return [node.elt]
    return None


def _indices_only(ctx: FileContext, data: ast.Call, func: object) -> bool:
    """A ``TensorDataset(torch.arange(n))`` (also through a name assigned once): the loader yields
    indices, not data to pin."""
    def index(node: ast.AST) -> bool:
        if isinstance(node, ast.Name):
            values = ctx.assigned(node.id, func)
            node = values[0] if len(values) == 1 else node
        return isinstance(node, ast.Call) and (ctx.qualname(node.func) or "") in ("torch.arange", "torch.randperm")
    return bool(data.args) and all(index(a) for a in data.args)


def _pin_unsafe(ctx: FileContext | None, call: ast.Call, func: object) -> bool:
    """A ``TensorDataset`` of tensors not visibly on the CPU (features a model computed, say):
    they may already be on the GPU, where ``pin_memory=True`` raises and gains nothing."""
    items = _list_items(ctx, call, func) if ctx is not None else None
    if items is not None:
        # a collate that reads files makes fresh CPU tensors: pinning them helps whatever the items are
        return not _collate_loads(ctx, call) and not all(_visibly_cpu(ctx, item, func) for item in items)
    data = _dataset_expr(ctx, call, func) if ctx is not None else None
    if not (isinstance(data, ast.Call) and (ctx.qualname(data.func) or "").rsplit(".", 1)[-1] in IN_MEMORY):
        return False
    return _indices_only(ctx, data, func) or not all(_visibly_cpu(ctx, arg, func) for arg in data.args)


def missing(call: ast.Call, ctx: FileContext | None = None, func: object = None) -> tuple[list[str], list[str]]:
    """(problems to report, keyword arguments ``--fix`` may add)."""
    problems, addable = [], []
    workers = kwarg(call, "num_workers")
    if workers is None and len(call.args) < 6:
        if not _in_memory(ctx, call, func):
            problems.append("num_workers=0 (the default)")
            addable.append("num_workers")
    elif is_const(workers, 0) and not _in_memory(ctx, call, func):
        problems.append("num_workers=0")
    pin = kwarg(call, "pin_memory")
    if pin is None and len(call.args) < 8:
        if not _pin_unsafe(ctx, call, func):
            problems.append("pin_memory=False (the default)")
            addable.append("pin_memory")
    elif is_const(pin, False):
        problems.append("pin_memory=False")
    return problems, addable


def _yields_cuda(ctx: FileContext, call: ast.Call, func: object) -> bool:
    """The dataset is a class of this file whose ``__getitem__`` returns CUDA tensors (GD102's
    finding): ``pin_memory=True`` would raise and workers cannot initialise CUDA after a fork."""
    data = _dataset_expr(ctx, call, func)
    return (isinstance(data, ast.Call) and isinstance(data.func, ast.Name)
            and data.func.id in cuda_dataset_classes(ctx))


def _one_batch_only(ctx: FileContext, call: ast.Call, func: object) -> bool:
    """The loader is bound to a name that is only ever read as ``next(iter(loader))``: one batch
    (a fixed sample grid, say) is taken per call, so there is no stream of batches whose loading
    workers or pinned copies could overlap with the GPU. A name with no reads at all is not
    exempt (a loader built and never read is indistinguishable from a snippet's)."""
    key = ("gd104-one-batch", id(call))
    if key in ctx.cache:
        return ctx.cache[key]
    names = [t.id for node, _ in ctx.stmts if isinstance(node, ast.Assign) and node.value is call
             for t in node.targets if isinstance(t, ast.Name)]
    one = False
    if len(names) == 1:
        scope = func if func is not None and names[0] in ctx.params.get(func, set()) | set(
            ctx.assigns.get(func, {})) and not _is_global(func, names[0]) else ctx.tree
        pkey = ("gd104-names", id(scope))
        if pkey not in ctx.cache:  # one walk per scope: every Name read, with its parent
            ctx.cache[pkey] = [(child, node) for node in ast.walk(scope) for child in ast.iter_child_nodes(node)
                               if isinstance(child, ast.Name) and isinstance(child.ctx, ast.Load)]
        pairs = [(n, p) for n, p in ctx.cache[pkey] if n.id == names[0]]
        parent = {n: p for n, p in pairs}
        reads = [n for n, _ in pairs]
        one = bool(reads) and all(_next_of_iter(n, parent, ctx, scope) for n in reads)
    ctx.cache[key] = one
    return one


def _parent_of(ctx: FileContext, scope: ast.AST, node: ast.AST | None) -> ast.AST | None:
    """The parent of an ``iter(...)`` call: found among the scope's calls (one walk, cached)."""
    key = ("gd104-call-parents", id(scope))
    if key not in ctx.cache:
        ctx.cache[key] = {child: n for n in ast.walk(scope) for child in ast.iter_child_nodes(n)
                          if isinstance(child, ast.Call) and isinstance(child.func, ast.Name)
                          and child.func.id == "iter"}
    return ctx.cache[key].get(node)


def _is_global(func: object, name: str) -> bool:
    return any(isinstance(n, ast.Global) and name in n.names for n in ast.walk(func))


def _next_of_iter(name: ast.Name, parent: dict, ctx: FileContext, scope: ast.AST) -> bool:
    inner = parent.get(name)
    outer = _parent_of(ctx, scope, inner)
    return (isinstance(inner, ast.Call) and isinstance(inner.func, ast.Name) and inner.func.id == "iter"
            and inner.args == [name] and isinstance(outer, ast.Call) and isinstance(outer.func, ast.Name)
            and outer.func.id == "next" and outer.args == [inner])


def check(ctx: FileContext) -> Iterator[Hit]:
    if not ctx.uses_cuda or ctx.is_test:
        return
    for call, where in ctx.calls:
        if ctx.qualname(call.func) not in LOADERS or has_star_kwargs(call) or _yields_cuda(ctx, call, where.func):
            continue
        if (_one_batch_only(ctx, call, where.func) or _constant_items(ctx, call, where.func)
                or _constants_only(ctx, call, where.func) or _literal_data(ctx, call, where.func)):
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
