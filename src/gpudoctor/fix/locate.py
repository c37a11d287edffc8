"""Where, in the user's file, the code a finding is about lives — or ``None``: then no patch.

Everything here is static and conservative, built on lint's file context
(:func:`gpudoctor.lint.walker.build_context`):

- the training loop: the loop around the first ``.backward()`` whose loop (or an enclosing one:
  gradient accumulation) also steps an optimizer (:func:`gpudoctor.lint.walker.is_optimizer_step`);
- the loader: the ``DataLoader(...)`` the training loop iterates (``for b in loader``,
  ``enumerate(loader)``, ``tqdm(loader)``), assigned once in the same scope;
- the model: the name whose ``.parameters()`` built that optimizer; its assignment before the loop;
- the forward: the statements of the loop's block from the first that calls the model to the one
  that assigns the loss ``.backward()`` is called on (:mod:`gpudoctor.fix.forward`);
- the batch copies: ``.to(...)``/``.cuda()`` on the loop's target names.

Trainer classes (``self.model``, ``self.optimizer``, a step helper the loop calls, a ``while`` loop
over ``next(iter(loader))``) are resolved by :mod:`gpudoctor.fix.methods`; a loop in another module
of the project by :mod:`gpudoctor.fix.project`. A construct not matched exactly (``**kwargs`` into
the loader, a loss computed in a ``with`` block ...) leaves the field ``None`` and the finding gets
text advice.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field

from gpudoctor.fix import hazards
from gpudoctor.fix.ops import Pos
from gpudoctor.lint.flow import parents
from gpudoctor.lint.rules.gd104_dataloader_defaults import LOADERS
from gpudoctor.lint.scope import FileContext, Where
from gpudoctor.lint.walker import build_context, is_backward, is_optimizer_step

_ITER_WRAPPERS = frozenset({"enumerate", "tqdm", "iter", "zip"})
DIST_SAMPLERS = frozenset({"torch.utils.data.DistributedSampler",
                           "torch.utils.data.distributed.DistributedSampler"})


@dataclass
class Located:
    """The training code of one file; a field is ``None`` (or empty) where it was not found safely."""

    ctx: FileContext
    lines: list[str]
    loop: ast.For | None = None
    func: ast.AST | None = None  # the function holding the loop (None: module level)
    step_func: ast.AST | None = None  # the function holding .backward() (func, or a helper it calls)
    backward: ast.Call | None = None
    step: ast.Call | None = None
    steps: list[ast.Call] = field(default_factory=list)  # every optimizer step of the loop (a GAN: two)
    loss: str | None = None
    optimizer: str | None = None
    model: str | None = None  # the name the loop's function calls the model by
    model_outer: str | None = None  # the name it is assigned to (in the caller, through a parameter)
    model_assign: ast.stmt | None = None
    loader_call: ast.Call | None = None
    batch_names: frozenset[str] = frozenset()
    batch_moves: list[ast.Call] = field(default_factory=list)
    batch_moves_non_blocking: int = 0  # copies of the batch already non-blocking (or via **kwargs)
    forward: tuple[ast.stmt, ast.stmt] | None = None  # first and last statement, one block
    forward_input: str | None = None  # the name passed first to the model, if a plain name
    autocast: bool = False  # the script already uses autocast somewhere
    custom_ops: str = ""  # where the project builds CUDA ops of its own (fix.hazards): no autocast
    h5py_init: str = ""  # where a dataset opens h5py.File in __init__ (fix.hazards): workers kept
    torch_name: bool = False  # ``import torch`` binds ``torch``
    conv: bool = False  # the file builds convolutions
    notes: list[str] = field(default_factory=list)
    file: str = ""  # the file located, when it is not the script (a module of its project)
    import_root: str = ""
    script: str = ""  # the script's path where the located file is a module of its project (fix.switches)  # that module's folder on sys.path

    def pos(self, node: ast.AST) -> Pos:
        """``(line, character column)`` of ``node`` (ast columns count UTF-8 bytes)."""
        text = self.lines[node.lineno - 1]
        return node.lineno, len(text.encode("utf-8")[:node.col_offset].decode("utf-8", errors="ignore"))

    def callee(self, call: ast.Call) -> str:
        """The source of what ``call`` calls: chained calls (``x.to(d).view(n)``) start at one
        position, and a keyword edit must land on the call it is about."""
        return ast.get_source_segment(self.ctx.source, call.func) or ""

    def stmt_of(self, node: ast.AST) -> ast.stmt:
        """The innermost statement holding ``node``."""
        up = parents(self.ctx)
        while not isinstance(node, ast.stmt):
            node = up[id(node)]
        return node

    def block_of(self, stmt: ast.stmt) -> list[ast.stmt] | None:
        """The statement list ``stmt`` sits in (a body, an ``orelse`` ...), or ``None``."""
        parent = parents(self.ctx).get(id(stmt), self.ctx.tree)
        for name in ("body", "orelse", "finalbody"):
            block = getattr(parent, name, None)
            if isinstance(block, list) and any(s is stmt for s in block):
                return block
        return None

    def enclosing_loops(self) -> list[ast.AST]:
        """The loops around the training loop, outermost first (within its function)."""
        up = parents(self.ctx)
        out, node = [], up.get(id(self.loop))
        while node is not None and not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            if isinstance(node, (ast.For, ast.While)):
                out.append(node)
            node = up.get(id(node))
        return out[::-1]


def _names(target: ast.AST) -> set[str]:
    return {n.id for n in ast.walk(target) if isinstance(n, ast.Name)}


def _iterated_name(it: ast.AST) -> str | None:
    """``loader`` of ``loader``, ``enumerate(loader)``, ``tqdm(loader, ...)``."""
    if isinstance(it, ast.Name):
        return it.id
    if isinstance(it, ast.Call) and it.args and isinstance(it.func, ast.Name) and it.func.id in _ITER_WRAPPERS:
        return _iterated_name(it.args[0])
    return None


def locate(source: str, path: str = "<script>") -> Located:
    """Find the training code of ``source``. Raises ``SyntaxError`` for a file that does not parse."""
    tree = ast.parse(source, filename=path)
    ctx = build_context(path, source, tree)
    found = Located(ctx=ctx, lines=source.split("\n"))
    found.torch_name = ctx.imports.get("torch") == "torch"
    found.autocast = any((c.func.attr if isinstance(c.func, ast.Attribute) else getattr(c.func, "id", "")) == "autocast"
                         for c, _ in ctx.calls)
    found.conv = any((ctx.qualname(c.func) or "").startswith("torch.nn.Conv") for c, _ in ctx.calls)
    found.custom_ops, found.h5py_init = hazards.custom_ops(tree, ""), hazards.h5py_in_init(tree, "")
    from gpudoctor.fix import methods

    backwards = [(c, w, methods.step_loop(found, w)) for c, w in ctx.calls if is_backward(c)]
    backwards = [b for b in backwards if b[2] is not None]
    if not backwards:
        found.notes.append("no .backward() inside a loop (or in a helper called once in a loop): "
                           "the training loop was not found")
        return found
    backward, where, (loop, func) = backwards[0]
    # the step in the loop, or (gradient accumulation: ``for micro in range(n): ... backward()``
    # inside the step's loop) in a loop around it, in the same function
    steps = [c for c, w in ctx.calls if is_optimizer_step(c, ctx, w)
             and (loop in w.loops or (where.loop is None and w.func is where.func)
                  or (where.loop is loop and w.func is where.func and bool(w.loops)
                      and w.loops[-1] in where.loops[:-1]))]
    if not isinstance(loop, (ast.For, ast.While)) or not steps:
        found.notes.append("the loop that calls .backward() does not step an optimizer")
        return found
    found.loop, found.func, found.backward, found.step, found.steps = loop, func, backward, steps[0], steps
    found.step_func = where.func
    recv = backward.func.value if isinstance(backward.func, ast.Attribute) else None
    if _scaler_call(recv, "scale"):  # ``scaler.scale(loss).backward()``
        recv = recv.args[0]
    if isinstance(recv, ast.Name):
        found.loss = recv.id
    step = steps[0]
    step_recv = step.func.value if isinstance(step.func, ast.Attribute) else None
    if _scaler_call(step, "step"):  # ``scaler.step(optimizer)``: the optimizer is its argument
        step_recv = step.args[0]
    found.optimizer = methods.key(step_recv) if step_recv is not None else None
    _find_model(found)
    if not methods.find_loader(found):
        _find_loader(found)
    _find_batch_moves(found)
    from gpudoctor.fix.forward import find_forward

    find_forward(found)
    if found.model is None:
        methods.find_model(found)
    return found


def _scaler_call(node: ast.AST | None, method: str) -> bool:
    """``<scaler>.scale(x)`` / ``<scaler>.step(opt)``: a GradScaler's call with one argument."""
    return (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == method
            and len(node.args) == 1 and "scaler" in ast.unparse(node.func.value).lower())


def _call_site(found: Located, func: ast.AST | None) -> tuple[ast.Call, Where] | None:
    """The one call of ``func`` in the file (by its name), or ``None``."""
    if not isinstance(func, (ast.FunctionDef, ast.AsyncFunctionDef)):
        return None
    method = func in found.ctx.func_cls  # ``self.name(...)``; a function: ``name(...)``

    def calls_it(call: ast.Call) -> bool:
        f = call.func
        if method:
            return isinstance(f, ast.Attribute) and f.attr == func.name and isinstance(f.value, ast.Name) \
                and f.value.id == "self"
        return isinstance(f, ast.Name) and f.id == func.name

    sites = [(c, w) for c, w in found.ctx.calls if calls_it(c)]
    return sites[0] if len(sites) == 1 else None


def _argument(found: Located, func: ast.FunctionDef, call: ast.Call, param: str) -> ast.AST | None:
    value = next((k.value for k in call.keywords if k.arg == param), None)
    names = [a.arg for a in func.args.posonlyargs + func.args.args]
    if value is None and param in names:
        i = names.index(param) - (1 if func in found.ctx.func_cls and names[0] == "self" else 0)
        if 0 <= i < len(call.args) and not any(isinstance(a, ast.Starred) for a in call.args[:i + 1]):
            value = call.args[i]
    return value


def origin(found: Located, name: str, func: ast.AST | None, depth: int = 0) -> tuple[str, ast.AST | None]:
    """Where ``name`` (used in ``func``) gets its value: a parameter is followed to the one call site
    of its function (twice at most); a name the function does not bind, to the enclosing function
    that does (a closure), else the module. Returns the name there and its scope."""
    params, assigns = found.ctx.params.get(func, set()), found.ctx.assigns.get(func, {})
    if depth < 2 and name in params and name not in assigns:
        site = _call_site(found, func)
        if site is not None:
            arg = _argument(found, func, site[0], name)
            if isinstance(arg, ast.Name):
                return origin(found, arg.id, site[1].func, depth + 1)
    if func is not None and name not in params and name not in assigns:
        return name, _enclosing(found, name, func)  # a closure's (resnest's nested train()) or the module's
    return name, func


def _enclosing(found: Located, name: str, func: ast.AST) -> ast.AST | None:
    """The function around ``func`` (nested in it) that binds ``name``, as Python resolves a free
    name; ``None``: the module."""
    outer = _scope(found, func)
    while outer is not None:
        if name in found.ctx.params.get(outer, set()) or name in found.ctx.assigns.get(outer, {}):
            return outer
        outer = _scope(found, outer)
    return None


def use_in(found: Located, scope: ast.AST | None) -> ast.AST | None:
    """The statement of ``scope`` that leads to the training loop: the loop itself, or the call
    (of the function holding it, through call sites) made from ``scope``."""
    node: ast.AST | None = found.loop
    for _ in range(3):
        if node is None or _scope(found, node) is scope:
            return node
        site = _call_site(found, _scope(found, node))
        node = found.stmt_of(site[0]) if site is not None else None
    return None


def dominating_assign(found: Located, name: str, scope: ast.AST | None, use: ast.AST | None) -> ast.stmt | None:
    """The last ``name = ...`` of ``scope`` that always runs before ``use``: its block also holds
    ``use`` (or a statement around it) further down."""
    if use is None:
        return None
    around, up, node = set(), parents(found.ctx), use
    while node is not None:
        around.add(id(node))
        node = up.get(id(node))
    best = None
    for stmt in ast.walk(scope or found.ctx.tree):
        if not ((_assigns(stmt, name) or _assigned_in_every_arm(stmt, name)) and _scope(found, stmt) is scope):
            continue
        block = found.block_of(stmt)
        if block is None:
            continue
        at = next(i for i, s in enumerate(block) if s is stmt)
        if any(id(s) in around for s in block[at + 1:]) and (best is None or stmt.lineno > best.lineno):
            best = stmt
    return best


def _assigns(stmt: ast.AST, name: str) -> bool:
    return (isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name)
            and stmt.targets[0].id == name)


def _assigned_in_every_arm(stmt: ast.AST, name: str) -> bool:
    """``if ...: name = A`` / ``else: name = B`` (elif chains too): after it, ``name`` is always set.
    An arm that ends in ``raise`` (``else: raise ValueError(...)`` after a chain picking the model
    by name) never reaches the code after the ``if``: it needs no assignment."""
    if not isinstance(stmt, ast.If) or not stmt.orelse:
        return False
    arms = [stmt.body, stmt.orelse]
    return all(isinstance(arm[-1], ast.Raise) or any(_assigns(s, name) or _assigned_in_every_arm(s, name) for s in arm)
               for arm in arms)


def _find_model(found: Located) -> None:
    from gpudoctor.fix.models import local_name, model_of

    if found.optimizer is None or "." in found.optimizer:
        return  # self.optimizer: methods.find_model, through the forward
    model = model_of(found, found.optimizer, found.step_func)  # a step helper's parameter: to its caller
    if model is None:
        found.notes.append(f"the model {found.optimizer} trains was not found (optimizer built from model.parameters())")
        return
    outer, scope = model
    # the name the loop's function calls it by: itself, or the parameter its call site fills with it
    found.model = local_name(found, outer, scope)
    found.model_assign = dominating_assign(found, outer, scope, use_in(found, scope))
    found.model_outer = outer


def _scope(found: Located, node: ast.AST) -> ast.AST | None:
    up = parents(found.ctx)
    node = up.get(id(node))
    while node is not None and not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
        node = up.get(id(node))
    return node


def _find_loader(found: Located) -> None:
    ctx, loop = found.ctx, found.loop
    it = loop.iter
    if isinstance(it, ast.Call) and ctx.qualname(it.func) in LOADERS:
        found.loader_call = it
        return
    name = _iterated_name(it)
    if name is None:
        found.notes.append("the training loop does not iterate a named loader")
        return
    name, scope = origin(found, name, found.func)
    values = ctx.assigned(name, scope)
    calls = [v for v in values if isinstance(v, ast.Call) and ctx.qualname(v.func) in LOADERS]
    if len(calls) != 1 or len(values) != 1:
        found.notes.append(f"{name} is not assigned from one DataLoader(...) call")
        return
    call = calls[0]
    if sum(k.arg is None for k in call.keywords) > 1 or any(isinstance(a, ast.Starred) for a in call.args):
        found.notes.append("the DataLoader call passes *args or two **kwargs: its arguments are not known")
        return
    if len(call.args) > 5:  # num_workers is the sixth positional parameter
        found.notes.append("the DataLoader call passes num_workers or later arguments by position")
        return
    found.loader_call = call


def _find_batch_moves(found: Located) -> None:
    loop = found.loop
    if isinstance(loop, ast.For):
        found.batch_names = frozenset(_names(loop.target))
    # ``[t.to(device) for t in batch]``: the comprehension's name is a batch tensor too
    names = found.batch_names | {n for c in ast.walk(loop) if isinstance(c, ast.comprehension)
                                 and isinstance(c.iter, ast.Name) and c.iter.id in found.batch_names
                                 for n in _names(c.target)}
    for node in ast.walk(loop):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                and node.func.attr in ("to", "cuda")):
            continue
        recv = node.func.value
        base = recv.value if isinstance(recv, ast.Subscript) else recv
        if isinstance(base, ast.Name) and base.id in names:
            if not any(k.arg in ("non_blocking", None) for k in node.keywords):
                found.batch_moves.append(node)
            else:
                found.batch_moves_non_blocking += 1


def epoch_loop(found: Located) -> tuple[ast.stmt, str] | None:
    """Where an epoch starts, and the epoch's variable: the first statement of a ``for EPOCH in ...``
    around the training loop, or, in a ``while`` loop that counts ``EPOCH += 1`` at its top level,
    the statement of its body that holds the training loop."""
    loops = found.enclosing_loops()
    for i in range(len(loops) - 1, -1, -1):
        loop = loops[i]
        if isinstance(loop, ast.For) and isinstance(loop.target, ast.Name):
            return loop.body[0], loop.target.id
        if isinstance(loop, ast.While):
            inner = loops[i + 1] if i + 1 < len(loops) else found.loop
            holder = next((s for s in loop.body if any(n is inner for n in ast.walk(s))), None)
            counters = [s.target.id for s in loop.body if isinstance(s, ast.AugAssign) and isinstance(s.op, ast.Add)
                        and isinstance(s.target, ast.Name) and isinstance(s.value, ast.Constant) and s.value.value == 1
                        and "epoch" in s.target.id.lower()]
            if holder is not None and len(counters) == 1:
                return holder, counters[0]
    return None


def sampler_name(found: Located) -> str | None:
    """The name of the DistributedSampler the training loader draws from."""
    if found.loader_call is None:
        return None
    value = next((k.value for k in found.loader_call.keywords if k.arg == "sampler"), None)
    if not isinstance(value, ast.Name):
        return None
    assigned = found.ctx.assigned(value.id, found.func)
    if assigned and all(isinstance(v, ast.Call) and found.ctx.qualname(v.func) in DIST_SAMPLERS for v in assigned):
        return value.id
    return None


__all__ = ["Located", "dominating_assign", "epoch_loop", "locate", "origin", "sampler_name", "use_in"]
