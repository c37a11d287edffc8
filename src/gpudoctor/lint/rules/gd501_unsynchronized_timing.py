"""GD501: wall-clock timing around GPU work without synchronisation or CUDA events."""

from __future__ import annotations

import ast
from collections.abc import Iterator

from gpudoctor.lint.rules.base import Hit
from gpudoctor.lint.scope import TIMERS, FileContext, call_name, is_const, is_cuda_expr, kwarg, last_ident
from gpudoctor.lint.walker import is_backward, is_optimizer_step

CODE = "GD501"
NAME = "unsynchronized-timing"
SEVERITY = "warning"
FIXABLE = False
MESSAGE = (
    "wall-clock timing of GPU work without `torch.cuda.synchronize()`: it measures kernel launch,"
    " not execution; synchronize before reading the clock or use `torch.cuda.Event`"
)
RATIONALE = (
    "CUDA kernels run asynchronously: `model(x)`, `loss.backward()` and `optimizer.step()` return"
    " as soon as the work is queued. `time.time() - t0` then measures how fast Python enqueues "
    "kernels, and the real cost lands on whichever later line synchronises. Call "
    "`torch.cuda.synchronize()` before each clock reading, or record "
    "`torch.cuda.Event(enable_timing=True)` pairs and read `start.elapsed_time(end)`. The rule "
    "fires when the timed region contains known GPU work (backward, an optimizer step, a model "
    "call, a CUDA matmul) and no synchronising call (`synchronize`, `.item()`, `.cpu()`, ...) "
    "lies between the two readings. Loop-to-loop timing (`dt = t1 - t0; t0 = t1`) and time since"
    " a start taken before the loop span whole iterations, so a sync anywhere in that loop (a "
    "`.item()` under `if`) settles them; a start re-taken at the top of each iteration does not "
    "(it times that step's kernel launches only); one re-taken only under an `if` of the loop "
    "(after a validation pass) still spans many steps. An NCCL `dist.barrier()` (or accelerate's "
    "`wait_for_everyone()`, the same barrier under a multi-process launch) outside an `if` "
    "counts as a sync, and so do `scaler.step(optimizer)` of a GradScaler not built with "
    "`enabled=False` (it reads `found_inf.item()` every step) and a call of a function of the same "
    "file whose body synchronises (`evaluate(model, loader)` that reads `.item()`), each outside an "
    "`if` when it lies between the two readings. Files that never import torch and run another framework (MXNet, "
    "TensorFlow, JAX) are not checked."
)
BAD = "t0 = time.time()\nloss = criterion(model(x), y)\nloss.backward()\nprint(time.time() - t0)\n"
GOOD = ("t0 = time.time()\nloss = criterion(model(x), y)\nloss.backward()\ntorch.cuda.synchronize()\n"
        "print(time.time() - t0)\n")
# ``barrier``: an NCCL ``dist.barrier()`` blocks the host until the stream's queued work is done;
# accelerate's ``wait_for_everyone()`` is that barrier under a multi-process launch
SYNCS = frozenset({"synchronize", "item", "cpu", "tolist", "numpy", "elapsed_time", "Event", "barrier",
                   "wait_for_everyone"})
_BARRIERS = frozenset({"barrier", "wait_for_everyone"})


def _scaler_syncs(ctx: FileContext, call: ast.Call, where) -> bool:
    """``scaler.step(optimizer)`` of a GradScaler not built with ``enabled=False``: it reads
    ``found_inf.item()`` before stepping, a host sync every step."""
    if call_name(call) != "step" or not isinstance(call.func, ast.Attribute) or not call.args:
        return False
    recv = call.func.value
    if ctx.kind(recv, where.func) != "scaler" and "scaler" not in last_ident(recv).lower():
        return False
    if isinstance(recv, ast.Name):
        values = ctx.assigned(recv.id, where.func)
    elif isinstance(recv, ast.Attribute) and isinstance(recv.value, ast.Name) and recv.value.id == "self":
        values = [v for v, _ in ctx.attr_assigns.get(where.cls, {}).get(recv.attr, [])]
    else:
        values = []
    return not any(isinstance(v, ast.Call) and is_const(kwarg(v, "enabled"), False) for v in values)


def _local_function_syncs(ctx: FileContext, call: ast.Call) -> bool:
    """A call of a function of this file (``evaluate(model, loader)``, ``self.validate()``) whose
    body synchronises (``.item()``, ``.cpu()``, ``synchronize()``)."""
    name = call_name(call)
    if name is None or not isinstance(call.func, (ast.Name, ast.Attribute)):
        return False
    if isinstance(call.func, ast.Attribute) and not (isinstance(call.func.value, ast.Name)
                                                     and call.func.value.id == "self"):
        return False
    key = ("gd501-local-sync", name)
    if key not in ctx.cache:
        bodies = [n for n in ast.walk(ctx.tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))
                  and n.name == name]
        ctx.cache[key] = bool(bodies) and all(
            any(isinstance(c, ast.Call) and call_name(c) in SYNCS - _BARRIERS for c in ast.walk(b)) for b in bodies)
    return ctx.cache[key]


def _syncs(ctx: FileContext, call: ast.Call, where) -> bool:
    return call_name(call) in SYNCS or _scaler_syncs(ctx, call, where) or _local_function_syncs(ctx, call)


def _timer_lines(ctx: FileContext, stmts: list) -> dict[str, list[int]]:
    """name -> lines where it is assigned a clock reading."""
    lines: dict[str, list[int]] = {}
    for stmt, _ in stmts:
        if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.value, ast.Call):
            target = stmt.targets[0]
            if isinstance(target, ast.Name) and ctx.qualname(stmt.value.func) in TIMERS:
                lines.setdefault(target.id, []).append(stmt.lineno)
    return lines


def _gpu_work(ctx: FileContext, call: ast.Call, where) -> bool:
    if is_backward(call) or is_optimizer_step(call, ctx, where):
        return True
    if isinstance(call.func, (ast.Name, ast.Attribute)) and ctx.expr_kind(call.func, where.func) in ("module", "wrapper"):
        return True
    return call_name(call) == "to" and bool(call.args) and is_cuda_expr(call.args[0])


_COMPOUND = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.For, ast.AsyncFor, ast.While,
             ast.With, ast.AsyncWith, ast.If, ast.Try)


def _spanning_loop(ctx: FileContext, stmts: list, node: ast.BinOp, start: str, end: int) -> ast.AST | None:
    """The loop around ``end - start`` when each reading spans whole iterations: ``start`` is
    re-assigned in that loop only at or after the end reading (``t0 = t1``, loop-to-loop), or
    only before the loop (time since the start), or only under an ``if`` of that loop (re-taken
    now and then, after a validation pass). Earlier iterations' syncs, wherever they are in
    the loop, then bound what the clock sees. A ``start`` taken at the top of each iteration
    spans one iteration's launches only and is not such a loop."""
    loops = [w.loops for s, w in stmts if s.lineno <= node.lineno <= (s.end_lineno or s.lineno)]
    if not loops or not loops[0]:
        return None
    loop = loops[0][-1]
    inside = [stmt.lineno for stmt, where in stmts if loop in where.loops and isinstance(stmt, ast.Assign)
              and not (where.guarded and where.loop is loop)  # re-taken now and then (after validation)
              and any(isinstance(t, ast.Name) and t.id == start for t in stmt.targets)]
    return loop if all(line >= end for line in inside) else None


def check(ctx: FileContext) -> Iterator[Hit]:
    if not ctx.uses_cuda or "time" not in ctx.source:
        return
    stmts_of: dict[object, list] = {}
    for stmt, where in ctx.stmts:
        if not isinstance(stmt, _COMPOUND):  # nested statements are listed on their own
            stmts_of.setdefault(where.func, []).append((stmt, where))
    calls_of: dict[object, list] = {}
    for call, where in ctx.calls:
        calls_of.setdefault(where.func, []).append((call, where))
    for func, stmts in stmts_of.items():
        timers = _timer_lines(ctx, stmts)
        calls = calls_of.get(func, [])
        if not timers or any(call_name(c) in ("Event", "elapsed_time") for c, _ in calls):
            continue
        nodes = [(n, s) for s, _ in stmts for n in ast.walk(s)]
        matmuls = [n.lineno for n, _ in nodes if isinstance(n, ast.BinOp) and isinstance(n.op, ast.MatMult)
                   and ctx.expr_kind(n, func) == "cuda_tensor"]
        for node, _ in nodes:
            if not (isinstance(node, ast.BinOp) and isinstance(node.op, ast.Sub)
                    and isinstance(node.right, ast.Name) and node.right.id in timers):
                continue
            left = node.left
            if isinstance(left, ast.Call) and ctx.qualname(left.func) in TIMERS:
                end = left.lineno
            elif isinstance(left, ast.Name) and left.id in timers:
                ends = [ln for ln in timers[left.id] if ln <= node.lineno]
                if not ends:
                    continue
                end = max(ends)
            else:
                continue
            starts = [ln for ln in timers[node.right.id] if ln < end]
            if not starts:
                continue
            start = max(starts)
            inside = [(c, w) for c, w in calls if start < c.lineno < end]
            if any(_syncs(ctx, c, w) and not (w.guarded and call_name(c) not in SYNCS - _BARRIERS)
                   for c, w in inside):  # a barrier, scaler step or local function under ``if``: now and then
                continue  # (a barrier only now and then, under an ``if``, leaves the other steps unsynced)
            loop = _spanning_loop(ctx, stmts, node, node.right.id, end)
            if loop is not None and any(_syncs(ctx, c, w) for c, w in calls if loop in w.loops):
                continue  # the reading spans whole iterations: the previous step's sync bounds it
            if any(_gpu_work(ctx, c, w) for c, w in inside) or any(start < ln < end for ln in matmuls):
                yield Hit(node)
