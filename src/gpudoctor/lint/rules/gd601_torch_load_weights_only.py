"""GD601: ``torch.load`` without ``weights_only=True``."""

from __future__ import annotations

import ast
from collections.abc import Iterator

from gpudoctor.lint.rules.base import Hit
from gpudoctor.lint.scope import FileContext, has_star_kwargs, is_const, kwarg

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
    "named like a test (`test_on_image.py`) is checked."
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


def check(ctx: FileContext) -> Iterator[Hit]:
    if ctx.holds_tests:
        return  # a test loads the checkpoint its own run just saved (fixture folder, mock hub, helper)
    safe_default = ctx.torch_floor is not None and ctx.torch_floor >= SAFE_DEFAULT
    for call, where in ctx.calls:
        if ctx.qualname(call.func) == "torch.load" and not has_star_kwargs(call):
            if _own_temporary_file(ctx, call, where.func):
                continue
            value = kwarg(call, "weights_only")
            if value is None and not safe_default:
                yield Hit(call)
            elif is_const(value, False):
                yield Hit(call, "`torch.load(weights_only=False)` can run arbitrary code from the file: "
                                "use weights_only=True unless the file is fully trusted")
