"""Call resolution into the project's own functions and methods, one step from the call site.

``resolve(ctx, call, where)`` answers "which ``def`` of this project runs here": a function of the
same file (``train_one_epoch(...)``), a method of the enclosing class (``self.clip(...)``), a method
of an object built from a project class (``meter = AverageMeter()`` then ``meter.update(loss)``),
or a function/class imported from a sibling module (``from utils import free_memory``, ``import
utils`` then ``utils.free_memory()``, relative imports included). The helper's file gets its own
:class:`FileContext` (cached per path), so its names resolve through its own imports.

Why hand-written over ``ast`` rather than LibCST's ``FullRepoManager``/``QualifiedNameProvider`` or
astroid inference: both re-parse every file into a much heavier tree (LibCST's parse is several
times slower than ``ast``; astroid adds inference on top), which would break the 20,000-files-in-60 s
budget, and the rules need only this one step of resolution, not type inference. Anything not
shown plainly (a parameter holding a callable, ``getattr``, a decorator that replaces the function)
resolves to None and rules stay silent.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from gpudoctor.lint.project import _star_target
from gpudoctor.lint.scope import FileContext, Where

_FUNCS = (ast.FunctionDef, ast.AsyncFunctionDef)


@dataclass(frozen=True, eq=False)
class Callee:
    """A resolved project function: its ``def``, the context of its file, and whether that file is
    another one than the caller's (then findings name both places)."""

    func: ast.FunctionDef | ast.AsyncFunctionDef
    ctx: FileContext
    other_file: bool

    def where(self) -> str:
        """``utils.py:12`` (the file's name and the ``def`` line)."""
        return f"{Path(self.ctx.path).name}:{self.func.lineno}"

    def bind(self, call: ast.Call) -> dict[str, ast.AST]:
        """Parameter name -> the argument expression the call passes (``self`` skipped)."""
        args = self.func.args
        names = [a.arg for a in args.posonlyargs + args.args]
        if names and names[0] in ("self", "cls") and self.ctx.func_cls.get(self.func) is not None:
            names = names[1:]
        out = {name: arg for name, arg in zip(names, call.args) if not isinstance(arg, ast.Starred)}
        kwnames = set(names) | {a.arg for a in args.kwonlyargs}
        out.update({k.arg: k.value for k in call.keywords if k.arg in kwnames})
        return out


def _top_defs(tree: ast.Module) -> dict[str, ast.AST]:
    found = _DEFS.get(id(tree))
    if found is None or found[0] is not tree:
        found = _DEFS[id(tree)] = (tree, {n.name: n for n in tree.body if isinstance(n, (*_FUNCS, ast.ClassDef))})
        if len(_DEFS) > 1024:
            _DEFS.pop(next(iter(_DEFS)))
    return found[1]


_DEFS: dict[int, tuple[ast.Module, dict[str, ast.AST]]] = {}  # id(tree) -> (tree, its top-level defs)


def _method(cls: ast.ClassDef, name: str) -> ast.AST | None:
    return next((n for n in cls.body if isinstance(n, _FUNCS) and n.name == name), None)


@lru_cache(maxsize=512)
def _file_context(path: Path) -> FileContext | None:
    from gpudoctor.lint.walker import build_context  # walker imports project, not calls

    try:
        source = path.read_text(encoding="utf-8", errors="replace")
        if len(source) > 1_000_000:
            return None
        return build_context(str(path), source, ast.parse(source))
    except (OSError, SyntaxError, ValueError, RecursionError):
        return None


def _local_imports(ctx: FileContext) -> dict[str, tuple[str, int, str | None]]:
    """Bound name -> (module, level, imported attribute or None for ``import mod``), top level only."""
    key = "local_imports"
    if key not in ctx.cache:
        out: dict[str, tuple[str, int, str | None]] = {}
        for node in ctx.tree.body:
            if isinstance(node, ast.ImportFrom) and node.names[0].name != "*":
                for alias in node.names:
                    out[alias.asname or alias.name] = (node.module or "", node.level, alias.name)
            elif isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.asname or "." not in alias.name:
                        out[alias.asname or alias.name] = (alias.name, 0, None)
        ctx.cache[key] = out
    return ctx.cache[key]


def _module_ctx(ctx: FileContext, module: str, level: int) -> FileContext | None:
    if not ctx.path or ctx.path == "-" or (not level and module.split(".")[0] in ("torch", "numpy", "os", "sys")):
        return None
    try:
        folder = Path(ctx.path).resolve().parent
    except (OSError, RuntimeError):
        return None
    target = _star_target(folder, module, level)
    return None if target is None else _file_context(target)


def imported_def(ctx: FileContext, name: str) -> tuple[ast.AST, FileContext] | None:
    """The project ``def``/``class`` a top-level import binds to ``name`` (None: not a project file)."""
    found = _local_imports(ctx).get(name)
    if found is None or found[2] is None:
        return None
    module, level, attr = found
    other = _module_ctx(ctx, module, level)
    node = _top_defs(other.tree).get(attr) if other is not None else None
    return (node, other) if node is not None else None


def _class_of(ctx: FileContext, expr: ast.AST, where: Where) -> tuple[ast.ClassDef, FileContext] | None:
    """The project class an object was built from: ``meter = AverageMeter()`` (one assignment in
    the function or at module level) or ``self.meter = AverageMeter()``."""
    if isinstance(expr, ast.Name):
        values = ctx.assigned(expr.id, where.func)
    elif isinstance(expr, ast.Attribute) and isinstance(expr.value, ast.Name) and expr.value.id == "self":
        cls = ctx.func_cls.get(where.func)
        values = [v for v, _ in ctx.attr_assigns.get(cls, {}).get(expr.attr, [])] if cls is not None else []
    else:
        return None
    if len(values) != 1 or not isinstance(values[0], ast.Call) or not isinstance(values[0].func, ast.Name):
        return None
    name = values[0].func.id
    local = _top_defs(ctx.tree).get(name)
    if isinstance(local, ast.ClassDef):
        return local, ctx
    found = imported_def(ctx, name)
    return found if found is not None and isinstance(found[0], ast.ClassDef) else None


def resolve(ctx: FileContext, call: ast.Call, where: Where) -> Callee | None:
    """The project function ``call`` runs, or None when it is not plainly one."""
    func = call.func
    if isinstance(func, ast.Name):
        local = _top_defs(ctx.tree).get(func.id)
        if isinstance(local, _FUNCS):
            return Callee(local, ctx, False)
        if local is None and func.id not in ctx.assigns.get(where.func, {}):
            found = imported_def(ctx, func.id)
            if found is not None and isinstance(found[0], _FUNCS):
                return Callee(found[0], found[1], True)
        return None
    if not isinstance(func, ast.Attribute):
        return None
    recv = func.value
    if isinstance(recv, ast.Name) and recv.id == "self" and where.cls is not None:
        method = _method(where.cls, func.attr)
        return Callee(method, ctx, False) if method is not None else None
    if isinstance(recv, ast.Name) and _local_imports(ctx).get(recv.id, ("", 0, "x"))[2] is None:
        module, level, _ = _local_imports(ctx)[recv.id]
        other = _module_ctx(ctx, module, level)  # ``import utils`` then ``utils.free_memory()``
        node = _top_defs(other.tree).get(func.attr) if other is not None else None
        return Callee(node, other, True) if isinstance(node, _FUNCS) else None
    owner = _class_of(ctx, recv, where)
    if owner is None:
        return None
    method = _method(owner[0], func.attr)
    return Callee(method, owner[1], owner[1] is not ctx) if method is not None else None


def body_calls(callee: Callee) -> list[tuple[ast.Call, Where]]:
    """The calls in the helper's own body (not in functions nested in it)."""
    return [(c, w) for c, w in callee.ctx.calls if w.func is callee.func]
