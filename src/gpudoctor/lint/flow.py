"""Where a node sits in its function's control flow: which arm of which ``if``/``try`` encloses it.

Rules whose claim is about one path (the AMP branch, the CUDA branch) use :func:`exclusive` to
tell apart two calls that can never run in the same pass, and :func:`version_gated` to recognise
compatibility code written for another PyTorch version. The parent map is built once per file.
"""

from __future__ import annotations

import ast

from gpudoctor.lint.scope import FileContext

_VERSION_WORDS = ("version", "__version__", "TORCH_VERSION", "digit_version", "parse_version")


def parents(ctx: FileContext) -> dict[int, ast.AST]:
    """id(node) -> its parent node, for every node of the file (computed once)."""
    key = "parents"
    if key not in ctx.cache:
        out: dict[int, ast.AST] = {}
        for node in ast.walk(ctx.tree):
            for child in ast.iter_child_nodes(node):
                out[id(child)] = node
        ctx.cache[key] = out
    return ctx.cache[key]


def arms(ctx: FileContext, node: ast.AST) -> tuple[tuple[int, str], ...]:
    """The (id(if or try), arm) pairs enclosing ``node``, innermost first, up to its function."""
    up = parents(ctx)
    out: list[tuple[int, str]] = []
    child, parent = node, up.get(id(node))
    while parent is not None and not isinstance(parent, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
        if isinstance(parent, (ast.If, ast.IfExp)):
            if child is not parent.test:
                body = parent.body if isinstance(parent.body, list) else [parent.body]
                out.append((id(parent), "body" if child in body else "else"))
        elif isinstance(parent, ast.Try) or type(parent).__name__ == "TryStar":
            if child in parent.handlers:
                out.append((id(parent), f"except{parent.handlers.index(child)}"))
            elif child in parent.body:
                out.append((id(parent), "try"))
        child, parent = parent, up.get(id(parent))
    return tuple(out)


def exclusive(ctx: FileContext, a: ast.AST, b: ast.AST) -> bool:
    """True when ``a`` and ``b`` lie in different arms of one ``if`` (or one ``try``'s body and a
    handler): they never both run in one pass through the function."""
    mine = dict(arms(ctx, a))
    for key, arm in arms(ctx, b):
        other = mine.get(key)
        if other is not None and other != arm:
            if "try" in (arm, other) and "except" not in arm + other:
                continue
            return True
    return False


def version_gated(ctx: FileContext, node: ast.AST) -> bool:
    """True inside an ``if`` that tests a PyTorch version, or inside an ``except`` handler (the
    fallback of ``try: new API / except: old API``): compatibility code, left alone."""
    up = parents(ctx)
    child, parent = node, up.get(id(node))
    while parent is not None:
        if isinstance(parent, (ast.If, ast.IfExp)) and child is not parent.test:
            test = ast.unparse(parent.test)
            if any(word in test for word in _VERSION_WORDS) or "hasattr(torch" in test:
                return True
        if isinstance(parent, ast.ExceptHandler):
            return True
        child, parent = parent, up.get(id(parent))
    return False
