"""The training step of a trainer class (or a step helper), located for ``fix``.

:mod:`gpudoctor.fix.locate` finds a loop around ``.backward()`` whose model, optimizer and loader
are plain names. Here are the shapes it leaves out, each resolved statically and conservatively:

- the step in a helper called from the loop: ``def _run_batch(self, x, y): ... loss.backward();
  self.optimizer.step()`` called once, inside ``for x, y in self.train_data:`` of another method;
  the loop is that call's loop;
- a ``while`` loop drawing batches with ``batch = next(it)``, ``it = iter(loader)``;
- ``self.<attr>``: resolved to its assignments in the class; the model is patched after its last
  assignment in ``__init__`` (every assignment of it must be there, at the top level), or after
  ``model = self.model`` / ``model, cfg = self.model, self.cfg`` in the method;
- the model: the callee of the forward call that feeds the loss (``out = self.model(x)`` then
  ``loss = F.cross_entropy(out, y)``, or ``logits, self.loss = model(x, y)``), accepted only if
  the file also calls ``.parameters()``, ``.train()``, ``.zero_grad()`` or ``.state_dict()`` on it
  (a criterion never does);
- the loader: through ``self.<attr>``, the parameter filled at the class's one construction
  (``Trainer(model, train_data, ...)``), and a local factory function whose one ``return`` is
  ``DataLoader(...)``.

Anything else: the field stays ``None`` and the finding gets text advice.
"""

from __future__ import annotations

import ast

_MODEL_USES = frozenset({"parameters", "train", "zero_grad", "state_dict", "named_parameters"})


def key(node: ast.AST) -> str | None:
    """``name`` or ``self.attr`` of an expression, else ``None``."""
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "self":
        return f"self.{node.attr}"
    return None


def call_site(found, func: ast.AST | None):
    """The one call of ``func``: ``name(...)``, ``self.name(...)`` for a method, ``Cls(...)`` for
    ``__init__``; ``None`` unless there is exactly one."""
    from gpudoctor.fix.locate import _call_site

    cls = found.ctx.func_cls.get(func)
    if cls is None or getattr(func, "name", "") != "__init__":
        return _call_site(found, func)
    sites = [(c, w) for c, w in found.ctx.calls if isinstance(c.func, ast.Name) and c.func.id == cls.name]
    return sites[0] if len(sites) == 1 else None


def step_loop(found, where) -> tuple[ast.AST, ast.AST | None] | None:
    """The training loop and its function, for a ``.backward()`` at ``where``: its own loop, or
    (no loop around it) the loop around the one call of its function."""
    if where.loop is not None:
        return where.loop, where.func
    site = call_site(found, where.func)
    if site is None or site[1].loop is None:
        return None
    return site[1].loop, site[1].func


def _init_assign(found, cls: ast.ClassDef, attr: str) -> ast.stmt | None:
    """The last ``self.attr = ...`` of ``cls.__init__``'s top level, when every assignment of
    ``self.attr`` in the class is such a statement."""
    values = found.ctx.attr_assigns.get(cls, {}).get(attr, [])
    init = next((f for f in cls.body if isinstance(f, ast.FunctionDef) and f.name == "__init__"), None)
    if init is None or not values or any(f is not init for _, f in values):
        return None
    tops = [s for s in init.body if isinstance(s, ast.Assign) and len(s.targets) == 1
            and key(s.targets[0]) == f"self.{attr}"]
    return tops[-1] if len(tops) == len(values) else None


def _alias(func: ast.AST | None, name: str, before: ast.AST) -> str | None:
    """``self.attr`` when ``name`` is bound once in ``func``, at its top level before ``before``,
    by ``name = self.attr`` or ``name, other = self.attr, self.other``."""
    if func is None:
        return None
    hits = [n for n in ast.walk(func) if isinstance(n, (ast.Assign, ast.AugAssign, ast.AnnAssign, ast.For, ast.With))
            and name in {t.id for t in ast.walk(n) if isinstance(t, ast.Name) and isinstance(t.ctx, ast.Store)}]
    if len(hits) != 1 or not isinstance(hits[0], ast.Assign) or hits[0] not in func.body \
            or hits[0].lineno >= before.lineno or len(hits[0].targets) != 1:
        return None
    target, value = hits[0].targets[0], hits[0].value
    if isinstance(target, ast.Name):
        k = key(value)
        return k if k is not None and k.startswith("self.") else None
    if isinstance(target, ast.Tuple) and isinstance(value, ast.Tuple) and len(target.elts) == len(value.elts):
        for t, v in zip(target.elts, value.elts):
            if isinstance(t, ast.Name) and t.id == name:
                k = key(v)
                return k if k is not None and k.startswith("self.") else None
    return None


def _unwrapped(node: ast.AST) -> ast.AST:
    """``self.model`` of ``self.model.module`` (the module inside a DDP/DataParallel wrapper)."""
    return node.value if isinstance(node, ast.Attribute) and node.attr == "module" else node


def _modelish(found, name: str) -> bool:
    """The file calls ``.parameters()``, ``.train()``, ``.state_dict()`` ... on ``name`` (or on the
    module it wraps: ``self.model.module.state_dict()``, as DDP scripts save checkpoints)."""
    return any(isinstance(c.func, ast.Attribute) and c.func.attr in _MODEL_USES
               and key(_unwrapped(c.func.value)) == name for c, _ in found.ctx.calls)


def _forward(found, block: list[ast.stmt], loss_at: int) -> tuple[int, ast.Call] | None:
    """The statement (index) of the block that starts the forward, and the model call: the plain
    callee whose result the loss statement reads (through names assigned in the statements before)."""
    imports = found.ctx.imports
    candidates: dict[str, tuple[int, ast.Call]] = {}
    from gpudoctor.fix.forward import forward_part

    for i in range(loss_at, -1, -1):
        if not forward_part(block[i]):
            break
        for node in ast.walk(block[i]):
            if isinstance(node, ast.Call):
                k = key(node.func)
                if k is not None and k.split(".")[0] not in imports and _modelish(found, k):
                    candidates[k] = (i, node)  # the earliest statement calling it wins
    return next(iter(candidates.values())) if len(candidates) == 1 else None


def find_model(found) -> None:
    """The model through the forward that feeds the loss (see the module doc)."""
    back_stmt = found.stmt_of(found.backward)
    block = found.block_of(back_stmt)
    loss_key = key(found.backward.func.value) if isinstance(found.backward.func, ast.Attribute) else None
    if block is None or loss_key is None:
        return
    at = next(i for i, s in enumerate(block) if s is back_stmt)
    loss_at = next((i for i in range(at - 1, -1, -1) if isinstance(block[i], ast.Assign)
                    and any(key(n) == loss_key for t in block[i].targets for n in ast.walk(t))), None)
    hit = _forward(found, block, loss_at) if loss_at is not None else None
    if hit is None:
        found.notes.append(f"the model's forward call before {loss_key} was not found")
        return
    first, call = hit
    found.loss = found.loss or loss_key
    found.model = key(call.func)
    found.forward = (block[first], block[loss_at])
    found.forward_input = call.args[0].id if call.args and isinstance(call.args[0], ast.Name) else None
    step_func = found.step_func
    target = found.model if found.model.startswith("self.") else _alias(step_func, found.model, found.loop)
    if target is None and step_func is not found.func:
        return  # a local model of the step helper: not followed
    if target is None:
        from gpudoctor.fix.locate import dominating_assign, origin, use_in

        outer, scope = origin(found, found.model, found.func)
        found.model_assign = dominating_assign(found, outer, scope, use_in(found, scope))
        found.model_outer = outer
        return
    cls = found.ctx.func_cls.get(step_func)
    found.model_assign = _init_assign(found, cls, target[5:]) if cls is not None else None
    found.model_outer = target
    if found.model_assign is None:
        found.notes.append(f"{target} is not assigned only at the top level of __init__")


def _loader_of(found, node: ast.AST, func: ast.AST | None, depth: int = 0) -> ast.Call | None:
    """The one ``DataLoader(...)`` call whose value ``node`` (in ``func``) holds."""
    from gpudoctor.lint.rules.gd104_dataloader_defaults import LOADERS

    ctx = found.ctx
    if depth > 6:
        return None
    if isinstance(node, ast.Call):
        if ctx.qualname(node.func) in LOADERS:
            return node
        if isinstance(node.func, ast.Name) and node.func.id == "iter" and len(node.args) == 1:
            return _loader_of(found, node.args[0], func, depth + 1)
        factory = next((f for f in ctx.tree.body if isinstance(f, ast.FunctionDef)
                        and isinstance(node.func, ast.Name) and f.name == node.func.id), None)
        returns = [r for r in ast.walk(factory) if isinstance(r, ast.Return)] if factory is not None else []
        if len(returns) == 1 and returns[0].value is not None:
            return _loader_of(found, returns[0].value, factory, depth + 1)
        return None
    k = key(node)
    if k is None:
        return None
    if k.startswith("self."):
        cls = ctx.func_cls.get(func)
        values = ctx.attr_assigns.get(cls, {}).get(k[5:], []) if cls is not None else []
        hits = {id(c): c for c in (_loader_of(found, v, f, depth + 1) for v, f in values)}
        return next(iter(hits.values())) if len(hits) == 1 and None not in hits.values() else None
    if k in ctx.params.get(func, set()) and k not in ctx.assigns.get(func, {}):
        from gpudoctor.fix.locate import _argument

        site = call_site(found, func)
        arg = _argument(found, func, site[0], k) if site is not None else None
        return _loader_of(found, arg, site[1].func, depth + 1) if arg is not None else None
    values = ctx.assigned(k, func)
    scope = func if k in ctx.assigns.get(func, {}) else None
    hits = {id(c): c for c in (_loader_of(found, v, scope, depth + 1) for v in values)}
    return next(iter(hits.values())) if len(hits) == 1 and None not in hits.values() else None


def find_loader(found) -> bool:
    """The loader of a loop over ``self.<attr>``, a factory's loader, or a ``while`` loop's
    ``next(it)``; True when this shape was handled (found, or a note says why not)."""
    loop = found.loop
    if isinstance(loop, ast.While):
        nexts = [n.args[0] for n in ast.walk(loop) if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)
                 and n.func.id == "next" and len(n.args) == 1]
        found.batch_names = frozenset(t.id for s in ast.walk(loop) if isinstance(s, ast.Assign)
                                      and isinstance(s.value, ast.Call) and getattr(s.value.func, "id", "") == "next"
                                      for t in s.targets if isinstance(t, ast.Name))
        calls = {id(c): c for c in (_loader_of(found, n, found.func) for n in nexts)}
    else:
        it = loop.iter
        while isinstance(it, ast.Call) and isinstance(it.func, ast.Name) and it.func.id in ("enumerate", "tqdm") \
                and it.args:
            it = it.args[0]
        if key(it) is None or not (key(it).startswith("self.") or _from_factory(found, it)):
            return False
        calls = {id(c): c for c in [_loader_of(found, it, found.func)]}
    if len(calls) == 1 and None not in calls.values():
        call = next(iter(calls.values()))
        if sum(k.arg is None for k in call.keywords) <= 1 and len(call.args) <= 5 \
                and not any(isinstance(a, ast.Starred) for a in call.args):
            found.loader_call = call
            return True
    found.notes.append("the loader of the training loop is not one DataLoader(...) call with known arguments")
    return True


def _from_factory(found, it: ast.AST) -> bool:
    """``loader = make_loader(...)`` in the loop's function: a name the plain locator cannot follow."""
    values = found.ctx.assigned(it.id, found.func) if isinstance(it, ast.Name) else []
    return len(values) == 1 and isinstance(values[0], ast.Call) and isinstance(values[0].func, ast.Name) \
        and values[0].func.id not in found.ctx.imports


__all__ = ["call_site", "find_loader", "find_model", "key", "step_loop"]
