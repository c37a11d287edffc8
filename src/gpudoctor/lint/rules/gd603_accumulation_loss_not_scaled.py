"""GD603: gradient accumulation whose loss is not divided by the number of micro-steps."""

from __future__ import annotations

import ast
from collections.abc import Iterator

from gpudoctor.lint.rules.base import Hit
from gpudoctor.lint.scope import FileContext, call_name, last_ident
from gpudoctor.lint.training import accumulation_loops

CODE = "GD603"
NAME = "accumulation-loss-not-scaled"
SEVERITY = "error"
FIXABLE = False
MESSAGE = (
    "gradient accumulation without dividing the loss: `.backward()` runs every micro-step and the "
    "optimizer steps every N, so the gradient is N times the mean; use `(loss / N).backward()`"
)
RATIONALE = (
    "`.backward()` adds into `.grad`. Accumulating N micro-batches of a mean loss sums N mean "
    "gradients: the update is N times what one batch of N x the size would give, as if the "
    "learning rate were multiplied by N (and gradient clipping thresholds are off by N). Divide "
    "the loss by the number of micro-steps before `backward()`. The rule fires when `.backward()` "
    "runs on every iteration while the optimizer steps only under `if (i + 1) % N == 0` (or after "
    "an inner `for _ in range(N)`), and the loss is plainly one micro-batch's loss (a loss module "
    "or function, a model's output or its `.loss`) never divided or multiplied; it stays silent "
    "for `accelerator.backward` / engine backward (they scale), a loss from an unknown helper, and "
    "files that rescale `.grad` themselves."
)
BAD = ("criterion = nn.CrossEntropyLoss()\nfor i, (x, y) in enumerate(loader):\n"
       "    loss = criterion(model(x), y)\n    loss.backward()\n    if (i + 1) % accum_steps == 0:\n"
       "        optimizer.step()\n        optimizer.zero_grad()\n")
GOOD = ("criterion = nn.CrossEntropyLoss()\nfor i, (x, y) in enumerate(loader):\n"
        "    loss = criterion(model(x), y) / accum_steps\n    loss.backward()\n"
        "    if (i + 1) % accum_steps == 0:\n        optimizer.step()\n        optimizer.zero_grad()\n")
_SCALED = (ast.Div, ast.Mult, ast.FloorDiv)
_OWNERS = ("accelerator", "fabric", "engine", "trainer", "runner", "model_engine")
_GRAD_RESCALE = ("grad /=", "grad *=", "grad.div_", "grad.mul_", "grad.data.div_", "grad.data.mul_")
_F_LOSSES = ("loss", "entropy", "nll", "kl_div", "mse", "l1", "huber", "margin")


def _local_functions(ctx: FileContext) -> set[str]:
    return {s.name for s, _ in ctx.stmts if isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef))}


def _state(ctx: FileContext, expr: ast.AST, func: object, depth: int = 0) -> str:
    """``raw`` (one micro-batch's loss, unscaled), ``scaled`` (divided or multiplied) or ``unknown``."""
    if depth > 4:
        return "unknown"
    if isinstance(expr, ast.BinOp):
        if isinstance(expr.op, _SCALED):
            return "scaled"
        if isinstance(expr.op, (ast.Add, ast.Sub)):
            # ``main + 0.1 * reg``: the sum is scaled only when every term is
            parts = [_state(ctx, expr.left, func, depth + 1), _state(ctx, expr.right, func, depth + 1)]
            if "unknown" in parts:
                return "unknown"
            return "scaled" if all(p == "scaled" for p in parts) else "raw"
        return "unknown"
    if isinstance(expr, ast.Name):
        values = ctx.assigned(expr.id, func)
        if not values:
            return "unknown"
        for stmt, where in ctx.stmts:
            if (where.func is func and isinstance(stmt, ast.AugAssign) and isinstance(stmt.target, ast.Name)
                    and stmt.target.id == expr.id and isinstance(stmt.op, _SCALED)):
                return "scaled"
        return _join([_state(ctx, v, func, depth + 1) for v in values])
    if isinstance(expr, (ast.Attribute, ast.Subscript)):  # ``outputs.loss`` / ``outputs["loss"]``
        key = expr.attr if isinstance(expr, ast.Attribute) else getattr(expr.slice, "value", None)
        if key == "loss":
            base = expr.value
            values = ctx.assigned(base.id, func) if isinstance(base, ast.Name) else [base]
            if values and all(_model_call(ctx, v, func) for v in values):
                return "raw"
        return "unknown"
    if isinstance(expr, ast.Call):
        if isinstance(expr.func, ast.Attribute) and expr.func.attr in ("mean", "sum", "float", "squeeze"):
            return _state(ctx, expr.func.value, func, depth + 1)
        if _model_call(ctx, expr, func):
            return "raw"
        q = ctx.qualname(expr.func) or ""
        if q.startswith("torch.nn.functional.") and any(w in q.rsplit(".", 1)[-1] for w in _F_LOSSES):
            return "raw"
        name = last_ident(expr.func).lower()
        if ("criterion" in name or name.endswith(("loss", "loss_fn"))) and name not in _local_functions(ctx):
            return "raw"
    return "unknown"


def _model_call(ctx: FileContext, expr: ast.AST, func: object) -> bool:
    return (isinstance(expr, ast.Call) and isinstance(expr.func, (ast.Name, ast.Attribute))
            and ctx.expr_kind(expr.func, func) in ("module", "wrapper"))


def _join(states: list[str]) -> str:
    if "scaled" in states:
        return "scaled"
    return "raw" if states and all(s == "raw" for s in states) else "unknown"


def backward_loss(call: ast.Call) -> ast.AST | None:
    """What ``.backward()`` is called on (``scaler.scale(x)`` unwrapped); None for an owner's
    ``accelerator.backward(loss)`` (accelerate and DeepSpeed scale the loss themselves)."""
    recv = call.func.value
    if call.args and last_ident(recv).lower().endswith(_OWNERS):
        return None
    while isinstance(recv, ast.Call) and call_name(recv) == "scale" and recv.args:
        recv = recv.args[0]
    return recv


def check(ctx: FileContext) -> Iterator[Hit]:
    if any(marker in ctx.source for marker in _GRAD_RESCALE):
        return
    for acc in accumulation_loops(ctx):
        loss = backward_loss(acc.backward)
        if loss is None:
            continue
        if _state(ctx, loss, acc.backward_where.func) == "raw":
            n = ast.unparse(acc.count)
            yield Hit(acc.backward, f"gradient accumulation without dividing the loss: `.backward()` runs every "
                                    f"micro-step and the optimizer steps every {n}, so the gradient is {n} "
                                    f"times the mean; backpropagate `loss / {n}`")
