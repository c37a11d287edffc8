"""GD201: a running total that adds the loss tensor itself, keeping every step's graph alive."""

from __future__ import annotations

import ast
from collections.abc import Iterator

from gpudoctor.lint.calls import resolve
from gpudoctor.lint.graph import loss_names
from gpudoctor.lint.rules.base import Hit
from gpudoctor.lint.scope import FileContext, call_name
from gpudoctor.lint.walker import is_optimizer_step

CODE = "GD201"
NAME = "loss-accumulated-with-graph"
SEVERITY = "error"
FIXABLE = False
MESSAGE = (
    "loss tensor added to a running total keeps every step's graph alive: add `loss.item()` or "
    "`loss.detach()`"
)
RATIONALE = (
    "`total_loss += loss` makes `total_loss` a tensor whose history includes every iteration's "
    "graph, so activations are never freed and memory climbs step after step until CUDA runs out "
    "of memory. Accumulate `loss.item()` (a Python float, one sync) or `loss.detach()` (stays on "
    "the GPU, no sync). The rule fires on names that `.backward()` is called on, inside the loop "
    "that calls it; gradient-accumulation code that calls `.backward()` on the total is left "
    "alone, and so is a total reset to a number inside that same step loop (`running_loss = 0` at "
    "each optimizer step): it lives one accumulation window, not the whole run. The parts of "
    "that loss are followed too: a name summed into it (`loss = l1 + 0.5 * kl_loss`) or returned "
    "beside it by the same call (`loss, loc_loss, cls_loss = criterion(...)`, names with `loss` "
    "in them), unless the function also assigns it from `.item()`/`.detach()` or it is computed "
    "under `no_grad`, and only in a loop that also steps the optimizer (a total of micro-batch parts "
    "that lives one accumulation window is left alone): `total_l1 += l1` keeps the graph as surely "
    "as `total += loss`. Totals kept in attributes and dicts (`self.losses[\"kd\"] += loss`) count "
    "alike, and so does a meter of the project (`meter.update(loss)`, in this file or a sibling "
    "module) whose method adds its argument itself to an attribute (`self.sum += val * n`); a meter "
    "that detaches or converts the value, or one created inside the loop, is left alone."
)
BAD = ("total = 0.0\nfor x, y in loader:\n    loss = criterion(model(x), y)\n    loss.backward()\n"
       "    total += loss\n")
GOOD = ("total = 0.0\nfor x, y in loader:\n    loss = criterion(model(x), y)\n    loss.backward()\n"
        "    total += loss.detach()\n")


def _added_loss(value: ast.AST, losses: set[str]) -> str | None:
    if isinstance(value, ast.Name) and value.id in losses:
        return value.id
    if isinstance(value, ast.BinOp) and isinstance(value.op, (ast.Add, ast.Sub, ast.Mult, ast.Div)):
        return _added_loss(value.left, losses) or _added_loss(value.right, losses)
    return None


def _detached(ctx: FileContext, func: object) -> set[str]:
    """Names that are also assigned ``x.item()`` / ``x.detach()`` in ``func``: not certain graphs."""
    out = set()
    for stmt, where in ctx.stmts:
        if where.func is func and isinstance(stmt, ast.Assign) and isinstance(stmt.value, ast.Call):
            if call_name(stmt.value) in ("item", "detach", "tolist", "float") or (
                    isinstance(stmt.value.func, ast.Name) and stmt.value.func.id == "float"):
                out |= {t.id for t in stmt.targets if isinstance(t, ast.Name)}
    return out


def _reset_in_loop(ctx: FileContext, target: str, where) -> bool:  # target: a name or ``self.x[...]`` text
    """``target`` is set back to a number inside the innermost step loop around the addition
    (``running_loss = 0`` at each optimizer step): the total spans one accumulation window."""
    loops = [loop for loop in where.loops if loop in ctx.step_loops]
    if not loops:
        return False
    for stmt, at in ctx.stmts:
        if (at.func is where.func and loops[-1] in at.loops and isinstance(stmt, ast.Assign)
                and any((t.id if isinstance(t, ast.Name) else ast.unparse(t)) == target for t in stmt.targets)
                and isinstance(stmt.value, ast.Constant) and type(stmt.value.value) in (int, float)):
            return True
    return False


def _summed_names(value: ast.AST, loss: str) -> set[str]:
    """Names added into ``loss``: terms of its sum, and names scaled by a number or named ``*loss*``
    inside a term (``0.1 * kl``, ``w * aux_loss``; not the weight ``w``)."""
    if isinstance(value, ast.Name):
        return {value.id} - {loss}
    if isinstance(value, ast.BinOp) and isinstance(value.op, (ast.Add, ast.Sub)):
        return _summed_names(value.left, loss) | _summed_names(value.right, loss)
    if isinstance(value, ast.BinOp) and isinstance(value.op, (ast.Mult, ast.Div)):
        pair = (value.left, value.right)
        return {n.id for n, other in zip(pair, pair[::-1]) if isinstance(n, ast.Name) and n.id != loss
                and ("loss" in n.id.lower() or isinstance(other, ast.Constant))}
    return set()


def _loss_parts(ctx: FileContext, func: object, losses: set[str]) -> dict[str, str]:
    """Part -> the back-propagated loss it belongs to, in ``func`` (outside no_grad)."""
    parts: dict[str, str] = {}
    for stmt, where in ctx.stmts:
        if where.func is not func or where.no_grad or not isinstance(stmt, ast.Assign) or len(stmt.targets) != 1:
            continue
        target = stmt.targets[0]
        if isinstance(target, ast.Name) and target.id in losses and isinstance(stmt.value, ast.BinOp):
            parts.update(dict.fromkeys(_summed_names(stmt.value, target.id), target.id))
        elif isinstance(target, ast.Tuple) and isinstance(stmt.value, ast.Call):
            names = [e.id for e in target.elts if isinstance(e, ast.Name)]
            owner = next((n for n in names if n in losses), None)
            if owner:
                parts.update({n: owner for n in names if n != owner and "loss" in n.lower()})
    no_grad = {t.id for stmt, where in ctx.stmts if where.func is func and where.no_grad
               and isinstance(stmt, ast.Assign) for t in stmt.targets if isinstance(t, ast.Name)}
    return {n: owner for n, owner in parts.items() if n not in losses and n not in no_grad}


def _spans_optimizer_steps(ctx: FileContext, where) -> bool:
    """A loop around the addition also steps the optimizer: the total outlives one step. A loop of
    micro-batches whose optimizer step comes after it (a GAN's accumulation window, the total a
    local of the step function) holds the parts one window only."""
    around = {id(loop) for loop in where.loops}
    return any(at.func is where.func and any(id(loop) in around for loop in at.loops)
               and is_optimizer_step(call, ctx, at) for call, at in ctx.calls)


def _target(stmt: ast.stmt) -> tuple[str, ast.AST] | None:
    """``total += x`` / ``self.total += x`` / ``self.losses["kd"] += x`` / ``t = t + x``: (target text, x)."""
    if isinstance(stmt, ast.AugAssign) and isinstance(stmt.op, ast.Add) and isinstance(
            stmt.target, (ast.Name, ast.Attribute, ast.Subscript)):
        return (stmt.target.id if isinstance(stmt.target, ast.Name) else ast.unparse(stmt.target)), stmt.value
    if (isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name)
            and isinstance(stmt.value, ast.BinOp) and isinstance(stmt.value.op, ast.Add)
            and isinstance(stmt.value.left, ast.Name) and stmt.value.left.id == stmt.targets[0].id):
        return stmt.targets[0].id, stmt.value.right
    return None


def check(ctx: FileContext) -> Iterator[Hit]:
    for stmt, where in ctx.stmts:
        if where.no_grad or not any(loop in ctx.step_loops for loop in where.loops):
            continue
        found = _target(stmt)
        if found is None:
            continue
        target, value = found
        detached = _detached(ctx, where.func)
        losses = loss_names(ctx, where.func) - detached
        if target in losses or target in _backward_texts(ctx, where.func):
            continue  # accumulating a loss that is itself back-propagated: intended
        name = _added_loss(value, losses)
        parts = {n: owner for n, owner in _loss_parts(ctx, where.func, losses).items() if n not in detached}
        part = None if name else _added_loss(value, set(parts))
        if target in parts or _reset_in_loop(ctx, target, where):
            continue
        if name:
            yield Hit(stmt, f"`{target} += {name}` keeps every step's autograd graph alive: "
                            f"add `{name}.item()` or `{name}.detach()`")
        elif part and _spans_optimizer_steps(ctx, where):
            yield Hit(stmt, f"`{target} += {part}` keeps every step's autograd graph alive (`{part}` is "
                            f"part of `{parts[part]}`, which is back-propagated): add `{part}.item()` or "
                            f"`{part}.detach()`")
    yield from _meter_hits(ctx)


def _backward_texts(ctx: FileContext, func: object) -> set[str]:
    """``self.acc`` of ``self.acc.backward()`` in ``func``: attribute totals that are back-propagated."""
    key = ("gd201_backward", func)
    if key not in ctx.cache:
        ctx.cache[key] = {ast.unparse(c.func.value) for c, w in ctx.calls if w.func is func
                          and isinstance(c.func, ast.Attribute) and c.func.attr == "backward"
                          and isinstance(c.func.value, (ast.Attribute, ast.Subscript))}
    return ctx.cache[key]


def _meter_hits(ctx: FileContext) -> Iterator[Hit]:
    """``meter.update(loss)`` in the step loop, where the project method adds its argument itself
    to an attribute (``self.sum += val * n``): the meter keeps every step's graph."""
    for call, where in ctx.calls:
        if (where.no_grad or where.loop not in ctx.step_loops or not isinstance(call.func, ast.Attribute)
                or not call.args or not isinstance(call.args[0], ast.Name)):
            continue
        losses = loss_names(ctx, where.func) - _detached(ctx, where.func)
        if call.args[0].id not in losses or _built_in_loop(ctx, call.func.value, where):
            continue
        callee = resolve(ctx, call, where)
        param = next(iter(callee.bind(call)), None) if callee is not None else None
        if param is None or callee.bind(call)[param] is not call.args[0]:
            continue
        if _sums_argument(callee, param):
            name = call.args[0].id
            yield Hit(call, f"`{ast.unparse(call.func)}({name})` adds `{name}` itself to a running total "
                            f"({callee.where()}), keeping every step's autograd graph alive: pass "
                            f"`{name}.item()` or `{name}.detach()`")


def _built_in_loop(ctx: FileContext, recv: ast.AST, where) -> bool:
    """The meter is created inside the step loop: its total lives one step."""
    if not isinstance(recv, ast.Name):
        return False
    return any(at.func is where.func and where.loop in at.loops and isinstance(stmt, ast.Assign)
               and any(isinstance(t, ast.Name) and t.id == recv.id for t in stmt.targets)
               for stmt, at in ctx.stmts)


def _sums_argument(callee, param: str) -> bool:
    """The method adds ``param`` (or ``param * n``) to a ``self`` attribute unconditionally and never
    rebinds, detaches or converts it."""
    sums = False
    for stmt, at in callee.ctx.stmts:
        if at.func is not callee.func:
            continue
        if isinstance(stmt, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
            targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
            if any(isinstance(n, ast.Name) and n.id == param for t in targets for n in ast.walk(t)):
                return False  # ``val = val.detach()`` or similar: not the argument itself
        if (isinstance(stmt, ast.AugAssign) and isinstance(stmt.op, ast.Add) and not at.guarded
                and at.loop is None and isinstance(stmt.target, ast.Attribute)
                and isinstance(stmt.target.value, ast.Name) and stmt.target.value.id == "self"
                and _added_loss(stmt.value, {param})):
            sums = True
    return sums
