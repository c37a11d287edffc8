"""GD601: ``torch.load`` without ``weights_only=True``."""

from __future__ import annotations

import ast
from collections.abc import Iterator

from gpudoctor.lint.rules.base import Hit
from gpudoctor.lint.scope import FileContext, Where, call_name, has_star_kwargs, is_const, kwarg

CODE = "GD601"
NAME = "torch-load-weights-only"
SEVERITY = "warning"
FIXABLE = False
MESSAGE = (
    "`torch.load` without `weights_only=True` can run arbitrary code from the file: pass "
    "weights_only=True"
)
RATIONALE = (
    "`torch.load` unpickles the file; with `weights_only=False` (the default before PyTorch 2.6) "
    "a crafted checkpoint runs arbitrary code on load. Pass `weights_only=True` so it loads only "
    "tensors and plain containers on every PyTorch version, and allow-list extra types with "
    "`torch.serialization.add_safe_globals` if needed. A project that declares `torch>=2.6` "
    "(requirements*.txt, pyproject.toml, setup.py or setup.cfg next to the file or above it, or "
    "`target-torch` in `[tool.gpudoctor.lint]`) already gets the safe default, and only an "
    "explicit `weights_only=False` is reported there. A file in a temporary folder the same run "
    "made (pytest's `tmp_path`/`tmpdir`, `tempfile`, also through a `self.<attr>` a test's `setUp` "
    "set from `tempfile.mkdtemp()`) was written by that run and is not reported, and test modules "
    "(`test_*.py`, `*_test.py`, `*_tests.py`, `*-tests.py`, `conftest.py`) that hold tests (`test_*` "
    "functions, pytest or unittest), which load what their own run saved, are skipped; a script "
    "named like a test (`test_on_image.py`) is checked. A load of the very path the same file "
    "saved to with `torch.save` inside its training loop, after that loop (a script reloading its "
    "best checkpoint at the end), reads the run's own output and is not reported; a resume from a "
    "file an earlier process left there (loaded before the first save), a load of a caller's path "
    "and a straight-line save-then-load demonstration (the load line people copy) are. Objects "
    "exchanged among the job's own ranks are not reported either: in a function that "
    "`torch.save`s and calls a collective, a load of an in-memory buffer or a `with tempfile` "
    "handle (an all-gather or broadcast of pickled objects), or any load when the save runs on "
    "every call (files in a shared folder between barriers; a save only when no cached file is "
    "found does not count, the file may be an earlier run's), and loads in `__setstate__` (the "
    "object's own pickled state, already being unpickled)."
)
BAD = "state = torch.load(\"ckpt.pt\", map_location=\"cpu\")\n"
GOOD = "state = torch.load(\"ckpt.pt\", map_location=\"cpu\", weights_only=True)\n"


SAFE_DEFAULT = (2, 6)  # torch.load's weights_only defaults to True from PyTorch 2.6


_TEMP_DIRS = frozenset({"tmp_path", "tmpdir", "tmp_path_factory", "tmpdir_factory"})  # pytest's fixtures


def _own_temporary_file(ctx: FileContext, call: ast.Call, func: object) -> bool:
    """The file lies in a temporary folder this process made (pytest's ``tmp_path``, ``tempfile``):
    it was written by the same run and is trusted."""
    path = call.args[0] if call.args else kwarg(call, "f")
    if path is None:
        return False
    exprs, seen = [(path, func)], set()
    while exprs and len(seen) < 32:  # follow names and ``self.<attr>`` to what they were assigned
        expr, scope = exprs.pop()
        if id(expr) in seen:
            continue
        seen.add(id(expr))
        for node in ast.walk(expr):
            if isinstance(node, ast.Name) and node.id in _TEMP_DIRS:
                return True
            if isinstance(node, (ast.Name, ast.Attribute)) and (ctx.qualname(node) or "").startswith("tempfile."):
                return True
            if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load):
                exprs += [(value, scope) for value in ctx.assigned(node.id, scope)]
            elif (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)
                  and node.value.id == "self" and scope in ctx.func_cls):  # set in setUp, read in a test
                exprs += ctx.attr_assigns.get(ctx.func_cls[scope], {}).get(node.attr, [])
    return False


def _functions(ctx: FileContext) -> dict[ast.AST, tuple[ast.AST | None, bool]]:
    """Each function defined in the file -> (the function it is defined in or None, is a method)."""
    if "gd601_functions" not in ctx.cache:
        ctx.cache["gd601_functions"] = {
            stmt: (where.func, where.cls is not None and where.func is None) for stmt, where in ctx.stmts
            if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef))}
    return ctx.cache["gd601_functions"]


def _lookup(ctx: FileContext, name: str, func: ast.AST | None) -> tuple[list[ast.AST], ast.AST | None]:
    """The values assigned to ``name`` in ``func`` or, failing that, in the scopes around it."""
    scope, functions = func, _functions(ctx)
    for _ in range(8):
        if name in ctx.assigns.get(scope, {}):
            return ctx.assigns[scope][name], scope
        if scope is None:
            break
        scope = functions.get(scope, (None, False))[0]
    return [], None


def _path_key(ctx: FileContext, expr: ast.AST | None, func: ast.AST | None, depth: int = 0) -> str | None:
    """A comparable form of a path expression: a name is followed to its single assigned value (a
    file handle to the path its ``with open(...)`` opened), a call of a function defined in this
    file stands for that function's name; a bare parameter (the caller's path) or a name with no
    single value gives None."""
    if expr is None or depth > 4:
        return None
    if isinstance(expr, ast.Name):
        if expr.id in ctx.params.get(func, set()):
            return None  # the caller's path
        for stmt, where in reversed(ctx.stmts):  # ``with open(p, "rb") as f: torch.load(f)``, innermost
            if (isinstance(stmt, (ast.With, ast.AsyncWith)) and where.func is func
                    and stmt.lineno <= expr.lineno <= (stmt.end_lineno or stmt.lineno)):
                for item in stmt.items:
                    var, opened = item.optional_vars, item.context_expr
                    if (isinstance(var, ast.Name) and var.id == expr.id and isinstance(opened, ast.Call)
                            and call_name(opened) == "open" and opened.args):
                        return _path_key(ctx, opened.args[0], func, depth + 1)
        values, scope = _lookup(ctx, expr.id, func)
        if len(values) != 1 or is_const(values[0], None):
            return None
        return _path_key(ctx, values[0], scope, depth + 1)
    if isinstance(expr, ast.Call) and isinstance(expr.func, ast.Name) and any(
            getattr(f, "name", None) == expr.func.id and not method for f, (_, method) in _functions(ctx).items()):
        return "call:" + expr.func.id  # ``get_checkpoint_path(stage)``: one folder, one naming scheme
    return ast.dump(expr)


def _run_line(ctx: FileContext, node: ast.AST, where: Where) -> tuple[ast.AST | None, int, bool]:
    """Where a call runs, as (scope, line, in a loop): its own line, or, inside a (non-method)
    function, the first line that calls that function in the scope that defines it, up a few
    levels; "in a loop" if the call or one of those calling lines is inside a loop."""
    scope, line, looped, functions = where.func, node.lineno, bool(where.loops), _functions(ctx)
    for _ in range(3):
        if scope is None or scope not in functions or functions[scope][1]:
            break
        parent = functions[scope][0]
        sites = [(call.lineno, bool(at.loops)) for call, at in ctx.calls
                 if at.func is parent and isinstance(call.func, ast.Name) and call.func.id == scope.name]
        if not sites:
            break
        scope, (line, site_looped) = parent, min(sites)
        looped = looped or site_looped
    return scope, line, looped


def _reloads_own_save(ctx: FileContext, call: ast.Call, where: Where) -> bool:
    """The load reads the checkpoint a ``torch.save`` in this file wrote to the same path earlier
    in the run, from inside a loop (the training loop's best/last checkpoint, reloaded after it).
    A straight-line ``torch.save(m, p)`` then ``torch.load(p)`` is a round-trip demonstration
    (tutorials), whose load line is the one people copy: still reported."""
    key = _path_key(ctx, call.args[0] if call.args else kwarg(call, "f"), where.func)
    if key is None:
        return False
    load_scope, load_line, _ = _run_line(ctx, call, where)
    for save, at in ctx.calls:
        if ctx.qualname(save.func) != "torch.save":
            continue
        target = save.args[1] if len(save.args) > 1 else kwarg(save, "f")
        if _path_key(ctx, target, at.func) == key:
            save_scope, save_line, looped = _run_line(ctx, save, at)
            if looped and save_scope is load_scope and save_line < load_line:
                return True
    return False


_COLLECTIVES = frozenset({"all_gather", "all_gather_object", "broadcast", "broadcast_object_list", "gather",
                          "gather_object", "scatter", "scatter_object_list", "send", "isend", "recv", "irecv",
                          "all_to_all", "barrier"})


def _exchanged_among_ranks(ctx: FileContext, call: ast.Call, func: object) -> bool:
    """The load reads what this job's own ranks serialized: the function ``torch.save``s and calls
    a collective, and the load reads an in-memory buffer or a ``with tempfile...`` handle (an
    all-gather or broadcast of pickled objects), or every call of the function saves first (an
    unconditional ``torch.save`` to a shared folder, a barrier, then the ranks' files); or the
    function is ``__setstate__``, whose bytes are the object's own pickled state, already being
    unpickled (``weights_only`` adds no safety there). A save only when no cached file is found
    does not count: the file may be an earlier run's."""
    if not isinstance(func, (ast.FunctionDef, ast.AsyncFunctionDef)):
        return False
    if func.name == "__setstate__":
        return True
    key = ("gd601-exchange", func)
    if key not in ctx.cache:
        calls = [(c, at) for c, at in ctx.calls if at.func is func]
        saves = [at for c, at in calls if ctx.qualname(c.func) == "torch.save"]
        collective = any(call_name(c) in _COLLECTIVES for c, _ in calls)
        ctx.cache[key] = (collective and bool(saves), collective and any(not at.guarded for at in saves))
    exchanged, unconditional = ctx.cache[key]
    return unconditional or (exchanged and bool(call.args) and _buffer(ctx, call.args[0], func))


def _buffer(ctx: FileContext, node: ast.AST, func: ast.AST) -> bool:
    """``io.BytesIO(...)`` or a ``tempfile`` file, also through a name every assignment of which
    is one (``with tempfile.TemporaryFile() as f`` binds ``f``)."""
    if isinstance(node, ast.Name):
        values = [v for v in ctx.assigned(node.id, func) if not isinstance(v, ast.Name)]
        return bool(values) and all(
            _with_tempfile(ctx, node.id, func) if isinstance(v, ast.Constant) and v.value is None
            else _buffer(ctx, v, func) for v in values)
    q = (ctx.qualname(node.func) or "") if isinstance(node, ast.Call) else ""
    return q in ("io.BytesIO", "io.BufferedReader") or q.startswith("tempfile.")


def _with_tempfile(ctx: FileContext, name: str, func: ast.AST) -> bool:
    return any(isinstance(n, (ast.With, ast.AsyncWith)) and any(
        isinstance(item.optional_vars, ast.Name) and item.optional_vars.id == name
        and isinstance(item.context_expr, ast.Call)
        and (ctx.qualname(item.context_expr.func) or "").startswith("tempfile.") for item in n.items)
        for n in ast.walk(func))


def check(ctx: FileContext) -> Iterator[Hit]:
    if ctx.holds_tests:
        return  # a test loads the checkpoint its own run just saved (fixture folder, mock hub, helper)
    safe_default = ctx.torch_floor is not None and ctx.torch_floor >= SAFE_DEFAULT
    for call, where in ctx.calls:
        if ctx.qualname(call.func) == "torch.load" and not has_star_kwargs(call):
            if (_own_temporary_file(ctx, call, where.func) or _reloads_own_save(ctx, call, where)
                    or _exchanged_among_ranks(ctx, call, where.func)):
                continue
            value = kwarg(call, "weights_only")
            if value is None and not safe_default:
                yield Hit(call)
            elif is_const(value, False):
                yield Hit(call, "`torch.load(weights_only=False)` can run arbitrary code from the file: "
                                "use weights_only=True unless the file is fully trusted")
