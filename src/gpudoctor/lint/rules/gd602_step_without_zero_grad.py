"""GD602: a training loop that steps the optimizer but never clears the gradients."""

from __future__ import annotations

import ast
from collections.abc import Iterator

from gpudoctor.lint.rules.base import Hit
from gpudoctor.lint.scope import FileContext, call_name
from gpudoctor.lint.walker import is_optimizer_step

CODE = "GD602"
NAME = "step-without-zero-grad"
SEVERITY = "error"
FIXABLE = False
MESSAGE = (
    "optimizer stepped in a loop but gradients are never cleared: call `optimizer.zero_grad()` "
    "every step"
)
RATIONALE = (
    "`.backward()` adds into `.grad`. Without `optimizer.zero_grad()` (or `model.zero_grad()`, or"
    " setting `p.grad = None`) each step's gradient includes every previous one, the effective "
    "learning rate grows without bound and the loss diverges. A single `zero_grad()` before the "
    "loop clears them once, not every step. The rule fires when nothing inside the step loop "
    "clears gradients and nothing clears them in another function it calls or hands to a call "
    "(`optimizer.step(closure)` whose closure calls `zero_grad()`), the loop calls no helper "
    "named like `*grad*`, the optimizer is not created inside the loop, and the file does not use"
    " distributed autograd (whose contexts keep gradients apart). A loop over optimizers "
    "(`for opt in optimizers: opt.step()`, or `scaler.step(opt)`) is not a step loop: the loop "
    "around it is checked, and "
    "with none (a per-step `train_step` method) the rule is silent."
    " Test modules (`test_*.py`, `*_test.py`, `conftest.py`) are skipped: an optimizer-equivalence test sets or "
    "accumulates the same gradients for both optimizers on purpose. Nor is a file that imports "
    "another framework (MXNet, TensorFlow, JAX, ...) and never torch: Gluon's `trainer.step` after "
    "`loss.backward()` needs no clearing (its gradients are overwritten by each backward)."
)
BAD = "for x, y in loader:\n    criterion(model(x), y).backward()\n    optimizer.step()\n"
GOOD = ("for x, y in loader:\n    optimizer.zero_grad()\n    criterion(model(x), y).backward()\n"
        "    optimizer.step()\n")
CLEARS = ("zero_grad", "grad = None", "grad.zero_", "grad=None", "set_to_none")


def _clears(ctx: FileContext) -> list[tuple[ast.AST, object]]:
    """Statements that clear gradients: ``zero_grad()``, ``p.grad = None``, ``p.grad.zero_()``."""
    out = []
    for stmt, where in ctx.stmts:
        if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.For, ast.AsyncFor,
                             ast.While, ast.If, ast.With, ast.AsyncWith, ast.Try)):
            continue
        text = ast.unparse(stmt)
        if any(marker in text for marker in CLEARS):
            out.append((stmt, where))
    return out


def _loop_names(loop: ast.AST) -> set[str]:
    target = getattr(loop, "target", None)
    return {n.id for n in ast.walk(target) if isinstance(n, ast.Name)} if target is not None else set()


def _step_loop(call: ast.Call, where: object) -> ast.AST | None:
    """The loop whose iterations are training steps. ``for name, opt in optimizers(): opt.step()``
    iterates over optimizers, one step each, not over steps: the loop around it (if any) is the
    step loop; with none (a per-step ``train_step`` method) nothing here repeats."""
    recv = call.func.value if isinstance(call.func, ast.Attribute) else None
    arg = call.args[0] if call.args else None  # ``scaler.step(opt)``: the optimizer is the argument
    loops = list(where.loops)
    while loops and any(isinstance(n, ast.Name) and n.id in _loop_names(loops[-1]) for n in (recv, arg)):
        loops.pop()
    return loops[-1] if loops else None


def _passed_functions(ctx: FileContext, loop: ast.AST) -> set[str]:
    """Names handed to a call inside the loop (``optimizer.step(closure)``, ``step(closure=fn)``):
    the callee runs them, so a ``zero_grad()`` in them clears every step."""
    return {a.id for c, w in ctx.calls if loop in w.loops
            for a in (*c.args, *(k.value for k in c.keywords)) if isinstance(a, ast.Name)}


def check(ctx: FileContext) -> Iterator[Hit]:
    if ctx.is_test:  # optimizer-equivalence tests set or accumulate gradients alike on purpose
        return
    if ctx.other_framework:  # MXNet Gluon's ``trainer.step`` after ``loss.backward()``: gradients overwritten
        return
    if ".backward(" not in ctx.source or "dist_autograd" in ctx.source:
        return  # distributed autograd keeps each context's gradients apart: nothing accumulates
    clears = _clears(ctx) if any(marker in ctx.source for marker in CLEARS) else []
    helpers = {loop for call, where in ctx.calls for loop in where.loops  # ``clear_grads(model)``
               if "grad" in (call_name(call) or "") and not (call_name(call) or "").startswith("clip_grad")}
    for call, where in ctx.calls:
        if where.loop in ctx.step_loops and where.loop not in helpers and is_optimizer_step(call, ctx, where):
            loop = _step_loop(call, where)
            if loop is None or loop not in ctx.step_loops or loop in helpers:
                continue
            if any(loop in w.loops for _, w in clears):
                continue  # cleared in the loop
            called = {call_name(c) for c, w in ctx.calls if loop in w.loops}
            called |= _passed_functions(ctx, loop)  # ``optimizer.step(closure)``: the step calls it
            if any(w.func is not where.func and (getattr(w.func, "name", None) in called or w.func is None
                                                 or isinstance(w.func, ast.Lambda)) for _, w in clears):
                continue  # cleared in a function this loop calls (or at module level): cannot decide
            before = any(w.func is where.func and s.lineno < loop.lineno for s, w in clears)
            if before:
                yield Hit(call, "gradients cleared once before the loop, not every step: each step adds into "
                                "the previous gradients; call `optimizer.zero_grad()` inside the loop")
                continue
            recv = call.func.value
            if isinstance(recv, ast.Name) and any(
                    where.loop.lineno <= getattr(v, "lineno", 0) <= (where.loop.end_lineno or 0)
                    for v in ctx.assigned(recv.id, where.func)):
                continue  # an optimizer built inside the loop takes one step per object: cannot decide
            yield Hit(call)
