"""The forward of the training step, located for autocast: the statements of the block that
calls ``loss.backward()``, from the first that calls the model to the one that assigns the loss.

Simple statements, and loops or ``if`` blocks that compute part of the loss (a style loss summed
over a network's features) with no ``.backward()``/``.step()`` in them (:func:`forward_part`).
When the backward is in a step helper called from the training loop
(``train_iter(epoch, gcn, optimizer, ...)``), the model is looked for by the helper's parameter
name (:func:`helper_name`).
"""

from __future__ import annotations

import ast

from gpudoctor.fix.locate import Located, _argument, _call_site, _names

_SIMPLE = (ast.Assign, ast.AnnAssign, ast.AugAssign, ast.Expr)
_COMPOUND = (ast.For, ast.While, ast.If)
_NOT_IN_FORWARD = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Yield, ast.YieldFrom)


def forward_part(stmt: ast.stmt) -> bool:
    """A statement the forward (autocast's ``with`` block) may span: a simple statement, or a loop
    or ``if`` that computes part of the loss (``for f, g in zip(feats, grams): style += mse(f, g)``)
    with no ``.backward()`` or ``.step()`` in it and no definition or ``yield``. Wrapping such a
    statement in ``with`` keeps its meaning (``break``/``continue``/``return`` act as before)."""
    if isinstance(stmt, _SIMPLE):
        return True
    return isinstance(stmt, _COMPOUND) and not any(
        isinstance(n, _NOT_IN_FORWARD) or (isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute)
                                           and n.func.attr in ("backward", "step")) for n in ast.walk(stmt))


def _calls_model(stmt: ast.stmt, model: str) -> ast.Call | None:
    for node in ast.walk(stmt):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == model:
            return node
    return None


def helper_name(found: Located, name: str) -> str | None:
    """The parameter of the step helper (the function holding ``.backward()``, called once from the
    training loop's function: ``train_iter(epoch, gcn, optimizer, ...)``) that the call fills with
    ``name``; ``name`` itself when the backward is in the loop's own function."""
    func = found.step_func
    if func is found.func:
        return name
    site = _call_site(found, func)
    if site is None or not isinstance(func, (ast.FunctionDef, ast.AsyncFunctionDef)):
        return None
    params = [a.arg for a in func.args.posonlyargs + func.args.args + func.args.kwonlyargs]
    hits = [p for p in params if isinstance(a := _argument(found, func, site[0], p), ast.Name) and a.id == name]
    return hits[0] if len(hits) == 1 and hits[0] not in found.ctx.assigns.get(func, {}) else None


def find_forward(found: Located) -> None:
    if found.loss is None or found.model is None:
        return
    model = helper_name(found, found.model)
    if model is None:
        found.notes.append(f"the step helper's name for the model {found.model} was not found")
        return
    back_stmt = found.stmt_of(found.backward)
    block = found.block_of(back_stmt)
    if block is None:
        return
    at = next(i for i, s in enumerate(block) if s is back_stmt)
    loss_at = next((i for i in range(at - 1, -1, -1) if isinstance(block[i], ast.Assign)
                    and any(found.loss in _names(t) for t in block[i].targets)), None)
    if loss_at is None:
        found.notes.append(f"{found.loss} is not assigned in the block that calls {found.loss}.backward()")
        return
    first = None
    for i in range(loss_at, -1, -1):
        if not forward_part(block[i]):
            break
        if _calls_model(block[i], model) is not None:
            first = i
    if first is None:
        found.notes.append(f"the forward call {model}(...) was not found before the loss")
        return
    found.forward = (block[first], block[loss_at])
    call = _calls_model(block[first], model)
    if call is not None and call.args and isinstance(call.args[0], ast.Name):
        found.forward_input = call.args[0].id


__all__ = ["find_forward", "forward_part", "helper_name"]
