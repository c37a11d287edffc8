"""GD202: model outputs or losses appended to a list without ``.detach()`` outside no_grad."""

from __future__ import annotations

import ast
from collections.abc import Iterator

from gpudoctor.lint.graph import carries_graph, graph_names, loss_names
from gpudoctor.lint.rules.base import Hit
from gpudoctor.lint.scope import FileContext, call_name

CODE = "GD202"
NAME = "outputs-kept-with-graph"
SEVERITY = "error"
FIXABLE = False
MESSAGE = "tensor with an autograd graph appended to a list: append `.detach()` (or `.detach().cpu()`)"
RATIONALE = (
    "Appending `output` or `loss` to a list that outlives the iteration keeps each step's whole "
    "graph and activations alive; memory grows every step until the OOM. `.cpu()` alone does not "
    "help, the copy still records its history. Append `output.detach()` / "
    "`output.detach().cpu()`, or run evaluation under `torch.no_grad()` / "
    "`torch.inference_mode()`. The rule fires only for outputs of a known model or criterion, or "
    "a loss that `.backward()` is called on. It stays silent on a local list inside a module's "
    "`forward` (also of a class whose base is imported from another file: its `forward` is taken "
    "for a Module's), or in another of its methods looping over its own blocks, directly or through a "
    "local list of them (skip connections, intermediates, "
    "feature vectors: those activations belong to the same graph and die with the call), or in a "
    "method of a Module (a class that defines `forward`) that runs tiles or chunks of its input "
    "(a loop over `range(...)`, `torch.split`/`.chunk`, or positions the call computes itself, never over a "
    "parameter such as a loader) through its own submodules "
    "(`self.encoder(tile)`: a VAE's tiled encode, concatenated and returned in the same call); on a "
    "value last computed under `no_grad` in the same iteration, in a helper function every call of "
    "which in the file runs under `no_grad` (a `@torch.no_grad()` caller or a `with` block), on a local list "
    "the same function pops again with `.pop()` (a stack of skip connections consumed within the call), and on a list whose "
    "losses are `.backward()`-ed later (the graphs are kept on purpose). Test modules "
    "(`test_*.py`, `*_test.py`, `conftest.py`) run a few steps on toy data and are skipped."
)
BAD = "preds = []\nfor x, _ in loader:\n    out = model(x)\n    preds.append(out)\n"
GOOD = ("preds = []\nwith torch.no_grad():\n    for x, _ in loader:\n        preds.append(model(x))\n"
        "for x, _ in loader:\n    preds.append(model(x).detach().cpu())\n")


def _inside(node: ast.AST, loop: ast.AST) -> bool:
    return loop.lineno <= getattr(node, "lineno", 0) <= (loop.end_lineno or loop.lineno)


def _self_list(ctx: FileContext, holder: ast.AST, where) -> bool:
    """``self.<attr>`` assigned a list literal in its class, and never inside this loop."""
    if not (isinstance(holder, ast.Attribute) and isinstance(holder.value, ast.Name) and holder.value.id == "self"):
        return False
    values = ctx.attr_assigns.get(ctx.func_cls.get(where.func), {}).get(holder.attr, [])
    return bool(values) and all(isinstance(v, (ast.List, ast.ListComp)) or (
        isinstance(v, ast.Call) and isinstance(v.func, ast.Name) and v.func.id == "list") for v, _ in values
    ) and not any(_inside(v, where.loop) for v, _ in values)


def _in_forward(ctx: FileContext, where) -> bool:
    """A module's own ``forward``, or another of its methods looping over its own blocks
    (``for module in self.input_blocks``): a local list there (U-Net skip connections, feature
    vectors) is part of the graph being built and dies when the call returns."""
    func, cls = where.func, where.cls
    if not (isinstance(func, (ast.FunctionDef, ast.AsyncFunctionDef)) and cls is not None
            and where.loop not in ctx.step_loops):
        return False
    loop_iter = getattr(where.loop, "iter", None)
    if _tiles_through_own_blocks(ctx, cls, where, loop_iter):
        return True
    if cls.name not in ctx.module_classes:  # the base is imported (``class FCOSHead(RetinaNetHead)``):
        return func.name == "forward" and _derived(cls)  # only the Module convention ``forward`` tells
    return func.name == "forward" or (loop_iter is not None and _own_blocks(ctx, loop_iter, func))


_SPLITS = frozenset({"split", "chunk", "unbind", "tensor_split"})


def _positions(ctx: FileContext, node: ast.AST, func) -> bool:
    """Tile or chunk positions computed in this call: ``range(...)``, a split of a tensor, ``zip`` /
    ``enumerate`` / ``reversed`` of those, or a local name the function assigns (``start_end =
    self.build_chunk_start_end(n)``), never a parameter (``for x in loader``)."""
    if isinstance(node, ast.Call):
        if isinstance(node.func, ast.Name) and node.func.id in ("zip", "enumerate", "reversed"):
            return bool(node.args) and all(_positions(ctx, a, func) for a in node.args)
        return (isinstance(node.func, ast.Name) and node.func.id == "range") or call_name(node) in _SPLITS
    return (isinstance(node, ast.Name) and node.id not in ctx.params.get(func, ())
            and bool(ctx.assigns.get(func, {}).get(node.id)))


def _tiles_through_own_blocks(ctx: FileContext, cls: ast.ClassDef, where, loop_iter) -> bool:
    """A Module (a class of the file's Modules, or one that defines ``forward``) runs tiles or chunks
    of this call's input through its own submodules: the loop goes over ``range(...)`` or a split of
    a tensor (``torch.split(z, n)``, ``x.chunk(k)``) and its body calls ``self.<attr>(...)`` for an
    attribute the class assigns (``self.encoder = Encoder(...)``). A VAE's tiled encode/decode
    concatenates and returns the tiles in the same call: one graph, which dies with the call."""
    if loop_iter is None or not (cls.name in ctx.module_classes or any(
            isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef)) and f.name == "forward" for f in cls.body)):
        return False
    if not _positions(ctx, loop_iter, where.func):
        return False
    owned = ctx.attr_assigns.get(cls, {})
    return any(isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and isinstance(n.func.value, ast.Name)
               and n.func.value.id == "self" and n.func.attr in owned for n in ast.walk(where.loop))


def _derived(cls: ast.ClassDef) -> bool:
    """The class has a base other than ``object``."""
    return any(not (isinstance(b, ast.Name) and b.id == "object") for b in cls.bases)


def _mentions_self(node: ast.AST) -> bool:
    return any(isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name) and n.value.id == "self"
               for n in ast.walk(node))


def _own_blocks(ctx: FileContext, loop_iter: ast.AST, func) -> bool:
    """The loop runs over the module's own blocks: ``self.input_blocks``, or a local name every
    assignment of which is built from them or from itself (``blocks = [self.stem, self.layer1]``,
    ``blocks = blocks[:stop + 1]``, ``blocks = self.blocks[:stop + 1]``)."""
    if _mentions_self(loop_iter):
        return True
    for n in ast.walk(loop_iter):
        if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load):
            values = ctx.assigned(n.id, func)
            if any(_mentions_self(v) for v in values) and all(
                    _mentions_self(v) or any(isinstance(m, ast.Name) and m.id == n.id for m in ast.walk(v))
                    for v in values):
                return True
    return False


def _func_stmts(ctx: FileContext, func) -> list:
    """The statements of one function (cached: several appends per function ask)."""
    key = ("gd202-stmts", func)
    if key not in ctx.cache:
        ctx.cache[key] = [(stmt, at) for stmt, at in ctx.stmts if at.func is func]
    return ctx.cache[key]


def _last_assign(ctx: FileContext, name: str, where, before: int):
    """The last ``name = ...`` in the same function and loop body, above line ``before``."""
    best = None
    for stmt, at in _func_stmts(ctx, where.func):
        if (isinstance(stmt, ast.Assign) and _inside(stmt, where.loop)
                and stmt.lineno < before and any(isinstance(t, ast.Name) and t.id == name for t in stmt.targets)):
            if best is None or stmt.lineno > best[0].lineno:
                best = (stmt, at)
    return best


def _computed_without_grad(ctx: FileContext, node: ast.AST, where, before: int, depth: int = 0) -> bool:
    """``loss = outputs.loss`` where ``outputs = model(x)`` ran under ``no_grad`` in this iteration."""
    while isinstance(node, (ast.Attribute, ast.Subscript)) or (
            isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
        node = node.func.value if isinstance(node, ast.Call) else node.value  # out.loss, out.mean()
    if not isinstance(node, ast.Name) or depth > 4:
        return False
    found = _last_assign(ctx, node.id, where, before)
    if found is None:
        return False
    stmt, at = found
    return at.no_grad or _computed_without_grad(ctx, stmt.value, where, stmt.lineno, depth + 1)


def _backward_later(ctx: FileContext, name: str, func) -> bool:
    """The list's losses are ``.backward()``-ed afterwards: ``losses[i].backward()``,
    ``sum(losses).backward()``, ``loss = losses[i]`` / ``for loss in losses`` then ``loss.backward()``."""
    losses = loss_names(ctx, func)
    if name in losses:
        return True
    for stmt, _ in _func_stmts(ctx, func):
        if isinstance(stmt, ast.Assign) and any(isinstance(t, ast.Name) and t.id in losses for t in stmt.targets):
            if any(isinstance(n, ast.Name) and n.id == name for n in ast.walk(stmt.value)):
                return True
        if (isinstance(stmt, (ast.For, ast.AsyncFor)) and isinstance(stmt.iter, ast.Name) and stmt.iter.id == name
                and any(isinstance(n, ast.Name) and n.id in losses for n in ast.walk(stmt.target))):
            return True
    for call, at in ctx.calls:
        if at.func is func and isinstance(call.func, ast.Attribute) and call.func.attr == "backward":
            if any(isinstance(n, ast.Name) and n.id == name for part in (call.func.value, *call.args)
                   for n in ast.walk(part)):
                return True
    return False


def _only_called_without_grad(ctx: FileContext, func) -> bool:
    """``func`` is a plain function of this file and every call of it (there is one at least) runs
    under ``no_grad``: a ``@torch.no_grad()`` caller or a ``with torch.no_grad():`` block."""
    if not isinstance(func, (ast.FunctionDef, ast.AsyncFunctionDef)) or func in ctx.func_cls:
        return False
    key = ("gd202-callers", func)
    if key not in ctx.cache:
        sites = [at for call, at in ctx.calls if isinstance(call.func, ast.Name) and call.func.id == func.name]
        ctx.cache[key] = bool(sites) and all(at.no_grad for at in sites)
    return ctx.cache[key]


def _popped_stack(ctx: FileContext, name: str, func) -> bool:
    """The same function pops the list again with ``name.pop()`` (no index): a stack of skip
    connections consumed within the call (a U-Net's down/up path), not a history kept across steps."""
    return any(at.func is func and isinstance(call.func, ast.Attribute) and call.func.attr == "pop"
               and not call.args and isinstance(call.func.value, ast.Name) and call.func.value.id == name
               for call, at in ctx.calls)


def check(ctx: FileContext) -> Iterator[Hit]:
    if ctx.is_test:
        return  # a test keeps a few toy steps' outputs to compare them: no memory to save
    for stmt, where in ctx.stmts:
        if where.no_grad or where.loop is None or not isinstance(stmt, ast.Expr):
            continue
        call = stmt.value
        if not (isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute)
                and call.func.attr == "append" and len(call.args) == 1):
            continue
        holder = call.func.value
        if isinstance(holder, ast.Name):
            values = ctx.assigned(holder.id, where.func)
            # the list must outlive the loop: every assignment to it is outside the innermost loop
            if not values or any(_inside(v, where.loop) for v in values):
                continue
            if (_in_forward(ctx, where) or _backward_later(ctx, holder.id, where.func)
                    or _popped_stack(ctx, holder.id, where.func)):
                continue
        elif not _self_list(ctx, holder, where):  # ``self.scores``: lives as long as the object
            continue
        if (_computed_without_grad(ctx, call.args[0], where, stmt.lineno)
                or _only_called_without_grad(ctx, where.func)):
            continue
        if carries_graph(ctx, call.args[0], where, graph_names(ctx, where.func)):
            yield Hit(call)
