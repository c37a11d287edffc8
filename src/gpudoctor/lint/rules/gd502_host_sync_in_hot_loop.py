"""GD502: a host-device sync (``.item()``, ``.cpu()``, ``print(tensor)``) on every training step."""

from __future__ import annotations

import ast
from collections.abc import Iterator

from gpudoctor.lint.graph import graph_names, loss_names
from gpudoctor.lint.calls import body_calls, resolve
from gpudoctor.lint.rules.base import Hit
from gpudoctor.lint.scope import FileContext

CODE = "GD502"
NAME = "host-sync-in-hot-loop"
SEVERITY = "warning"
FIXABLE = False
MESSAGE = "host-device sync on every training step: do it every N steps (`if step % log_every == 0`)"
RATIONALE = (
    "`.item()`, `.cpu()`, `.tolist()`, `.numpy()` and printing a tensor make the CPU wait until "
    "the GPU has finished everything queued so far, so the CPU cannot run ahead and queue the "
    "next step; the GPU idles while Python prepares each step, which shows most on short steps. "
    "Keep the running loss on the GPU (`total += loss.detach()`) and read it every N steps. The "
    "rule fires only on the step loop itself (the loop that calls `.backward()`, "
    "`optimizer.step()`, or a helper given both a loss and an optimizer, such as DeiT's "
    "`loss_scaler(loss, optimizer, ...)`) and never under an `if`, where logging usually is, in files that name a "
    "device (CUDA, NCCL, `torch.accelerator`, a `device`). A read that follows an unconditional "
    "`torch.cuda.synchronize()` in the same pass adds no wait (the device is already idle) and is "
    "not reported (also when the sync is called through a file-level alias, `sync = "
    "torch.cuda.synchronize if cuda else (lambda: None)`, or a function of the file that syncs), nor is an `.item()` whose value is a length or index the next lines need on the "
    "host (`x[:, :lens.max().item()]`, `n = mask.sum().item()` then `x[:n]` or `range(n)`): a "
    "data-dependent shape costs that sync wherever it is read. Test modules (`test_*.py`, `*_test.py`, `conftest.py`) check values on toy "
    "data, not throughput, and are skipped. A loss or model output passed to a project helper on "
    "every step (`meter.update(loss)`, `log_loss(loss)`, in this file or a sibling module) whose "
    "body reads it unconditionally (`val.item()`, `float(val)`) is reported at the call, naming the helper."
)
BAD = "for x, y in loader:\n    loss = step(x, y)\n    loss.backward()\n    running += loss.item()\n"
GOOD = ("for i, (x, y) in enumerate(loader):\n    loss = step(x, y)\n    loss.backward()\n"
        "    running += loss.detach()\n    if i % 100 == 0:\n        print(running.item() / 100)\n")
METHODS = frozenset({"item", "cpu", "tolist", "numpy"})


def _tensor_arg(ctx: FileContext, node: ast.AST, func: object, losses: set[str]) -> bool:
    if isinstance(node, ast.JoinedStr):
        return any(_tensor_arg(ctx, v.value, func, losses) for v in node.values if isinstance(v, ast.FormattedValue))
    if isinstance(node, ast.Name):
        return node.id in losses or ctx.kind(node, func) in ("tensor", "cuda_tensor")
    return False


def _on_device(ctx: FileContext, node: ast.AST, func: object, graph: set[str]) -> bool:
    """The receiver derives from a loss/model output or a known CUDA tensor."""
    for sub in ast.walk(node):
        if isinstance(sub, ast.Name) and (sub.id in graph or ctx.kind(sub, func) == "cuda_tensor"):
            return True
    return False


SYNCS = frozenset({"torch.cuda.synchronize", "torch.accelerator.synchronize", "torch.xpu.synchronize"})


def _synced_lines(ctx: FileContext) -> dict[object, int]:
    """Step loop -> line of the first unconditional ``torch.cuda.synchronize()`` in its body."""
    first: dict[object, int] = {}
    aliases = _sync_aliases(ctx)
    for call, where in ctx.calls:
        if where.loop in ctx.step_loops and not where.guarded and (
                ctx.qualname(call.func) in SYNCS or isinstance(call.func, ast.Name) and call.func.id in aliases):
            first[where.loop] = min(first.get(where.loop, call.lineno), call.lineno)
    return first


def _sync_aliases(ctx: FileContext) -> set[str]:
    """Names of the file that stand for a device sync: ``sync = torch.cuda.synchronize if cuda
    else (lambda: None)`` at module level, or a module-level function whose body calls one
    unconditionally (``def synchronize(): torch.cuda.synchronize()``)."""
    names: set[str] = set()
    for node in ctx.tree.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            if any(isinstance(n, ast.Attribute) and ctx.qualname(n) in SYNCS for n in ast.walk(node.value)):
                names.add(node.targets[0].id)
        elif isinstance(node, ast.FunctionDef) and any(
                isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call)
                and ctx.qualname(stmt.value.func) in SYNCS for stmt in node.body):
            names.add(node.name)
    return names


_SIZE_CALLS = frozenset({"range", "arange", "zeros", "ones", "empty", "full", "randn", "rand", "randint",
                         "narrow", "view", "reshape", "expand", "repeat", "split", "chunk", "topk"})


def _in_size(node: ast.AST, parents: dict[int, ast.AST]) -> bool:
    """``node`` lies in a subscript's index or is a size/count argument (``range(n)``, ``x.view(n, -1)``)."""
    child = node
    while id(child) in parents:
        parent = parents[id(child)]
        if isinstance(parent, ast.Subscript) and child is parent.slice:
            return True
        if isinstance(parent, ast.Call) and child in parent.args and isinstance(parent.func, (ast.Name, ast.Attribute)):
            name = parent.func.id if isinstance(parent.func, ast.Name) else parent.func.attr
            if name in _SIZE_CALLS:
                return True
        if isinstance(parent, ast.stmt):
            return False
        child = parent
    return False


def _shape_value(ctx: FileContext, call: ast.Call, func: object) -> bool:
    """The read gives a length or index the host needs next (``x[:, :lens.max().item()]``, or
    ``n = lens.max().item()`` then ``x[:n]``/``range(n)``): the sync is the price of a data-dependent
    shape, not a log that can wait N steps."""
    key = ("gd502_parents", func)
    if key not in ctx.cache:
        root = func if func is not None else ctx.tree
        ctx.cache[key] = {id(c): p for p in ast.walk(root) for c in ast.iter_child_nodes(p)}
    parents = ctx.cache[key]
    if _in_size(call, parents):
        return True
    assign = parents.get(id(call))
    if not (isinstance(assign, ast.Assign) and len(assign.targets) == 1 and isinstance(assign.targets[0], ast.Name)):
        return False
    name = assign.targets[0].id
    scope = assign
    while id(scope) in parents and not isinstance(scope, (ast.For, ast.AsyncFor, ast.While)):
        scope = parents[id(scope)]  # the loop body the value is read in
    return any(isinstance(n, ast.Name) and n.id == name and isinstance(n.ctx, ast.Load) and _in_size(n, parents)
               for n in ast.walk(scope))


def check(ctx: FileContext) -> Iterator[Hit]:
    if not ctx.uses_gpu or ctx.is_test:
        return  # CPU-only script: no device to wait for; a test checks values, not throughput
    synced = _synced_lines(ctx)
    for call, where in ctx.calls:
        if where.loop not in ctx.step_loops or where.guarded:
            continue
        if synced.get(where.loop, call.lineno) < call.lineno:
            continue  # the loop already waited for the device just above: this read costs nothing more
        if isinstance(call.func, ast.Attribute) and call.func.attr in METHODS and not call.args:
            # .item() is read from GPU memory in practice; .cpu()/.numpy()/.tolist() only when the
            # tensor is known to live there (a CPU batch's .tolist() costs no sync)
            if call.func.attr != "item" and not _on_device(ctx, call.func.value, where.func,
                                                           graph_names(ctx, where.func)):
                continue
            if call.func.attr == "item" and _shape_value(ctx, call, where.func):
                continue
            yield Hit(call, f"`.{call.func.attr}()` on every training step waits for the GPU: "
                            "do it every N steps (`if step % log_every == 0`)")
        elif isinstance(call.func, ast.Name) and call.func.id in ("print", "float") and call.args:
            losses = loss_names(ctx, where.func)
            if any(_tensor_arg(ctx, a, where.func, losses) for a in call.args):
                yield Hit(call, f"`{call.func.id}()` of a tensor on every training step waits for the GPU: "
                                "do it every N steps (`if step % log_every == 0`)")
        elif call.args or call.keywords:
            hit = _helper_sync(ctx, call, where)
            if hit is not None:
                yield hit


def _helper_sync(ctx: FileContext, call: ast.Call, where) -> Hit | None:
    """A loss/output passed to a project helper that reads it on the host unconditionally."""
    graph = graph_names(ctx, where.func)
    if not any(isinstance(a, ast.Name) and a.id in graph for a in [*call.args, *(k.value for k in call.keywords)]):
        return None
    callee = resolve(ctx, call, where)
    if callee is None:
        return None
    passed = {p: a.id for p, a in callee.bind(call).items() if isinstance(a, ast.Name) and a.id in graph}
    for inner, at in body_calls(callee):
        if at.guarded or at.loop is not None:
            continue
        if isinstance(inner.func, ast.Attribute) and inner.func.attr in METHODS and not inner.args:
            recv = inner.func.value
        elif isinstance(inner.func, ast.Name) and inner.func.id == "float" and len(inner.args) == 1:
            recv = inner.args[0]
        else:
            continue
        if isinstance(recv, ast.Name) and recv.id in passed:
            read = f".{inner.func.attr}()" if isinstance(inner.func, ast.Attribute) else "float()"
            return Hit(call, f"`{ast.unparse(call.func)}()` ({callee.where()}) reads `{passed[recv.id]}` with "
                             f"`{read}` on every training step, which waits for the GPU: pass "
                             f"`{passed[recv.id]}.detach()` and read it every N steps")
    return None

