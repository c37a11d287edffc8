"""GD301: the deprecated ``torch.cuda.amp`` / ``torch.cpu.amp`` API."""

from __future__ import annotations

import ast
from collections.abc import Iterator

from gpudoctor.lint.flow import version_gated
from gpudoctor.lint.rules.base import Hit
from gpudoctor.lint.scope import FileContext

CODE = "GD301"
NAME = "deprecated-cuda-amp"
SEVERITY = "warning"
FIXABLE = True
MESSAGE = "`torch.cuda.amp` is deprecated: use `torch.amp` with the device type"
RATIONALE = (
    "`torch.cuda.amp.autocast(...)`, `torch.cuda.amp.GradScaler(...)` and `custom_fwd/custom_bwd`"
    " are deprecated since PyTorch 2.4 and print a FutureWarning on every call; the same API "
    "lives in `torch.amp` with an explicit device type: `torch.amp.autocast(\"cuda\", ...)`, "
    "`torch.amp.GradScaler(\"cuda\")`, `torch.amp.custom_fwd(device_type=\"cuda\")`. `--fix` rewrites"
    " the calls, decorators and `from torch.cuda.amp import ...` lines. Compatibility code is left "
    "alone: the fallback in an `except` handler, a branch that tests the torch version, and a "
    "project whose declared torch floor predates the replacement (`torch.amp.GradScaler` needs "
    "2.3, `torch.amp.autocast` 1.10, `custom_fwd(device_type=...)` 2.4), or whose declared torch "
    "is capped below 2.4 (`torch==1.13.1`, `torch<2.4`), where nothing is deprecated yet."
)
BAD = "scaler = torch.cuda.amp.GradScaler()\nwith torch.cuda.amp.autocast():\n    loss = model(x)\n"
GOOD = "scaler = torch.amp.GradScaler(\"cuda\")\nwith torch.amp.autocast(\"cuda\"):\n    loss = model(x)\n"
DEPRECATED = {f"torch.{dev}.amp.{name}": dev for dev in ("cuda", "cpu")
              for name in ("autocast", "GradScaler", "custom_fwd", "custom_bwd")}
MODULES = ("torch.cuda.amp", "torch.cpu.amp")


def _message(qual: str) -> str:
    dev, name = qual.split(".")[1], qual.rsplit(".", 1)[-1]
    if name.startswith("custom_"):
        new = f"`torch.amp.{name}(device_type=\"{dev}\")`"
    else:
        new = f"`torch.amp.{name}(\"{dev}\", ...)`"
    return f"`{qual}` is deprecated: use {new}"


# the version that brought the replacement: a project supporting older torch cannot switch
DEPRECATED_SINCE = (2, 4)
SINCE = {"autocast": (1, 10), "GradScaler": (2, 3), "custom_fwd": (2, 4), "custom_bwd": (2, 4)}


def _actionable(ctx: FileContext, node: ast.AST, name: str | None) -> bool:
    """False in compatibility code (a version test or an ``except`` fallback), when the
    project's declared torch floor predates the replacement, and when its declared torch is
    capped below the deprecation (a pin such as ``torch==1.13.1``)."""
    if version_gated(ctx, node):
        return False
    if ctx.torch_ceiling is not None and ctx.torch_ceiling <= DEPRECATED_SINCE:
        return False  # every torch the project declares predates the deprecation
    floor = ctx.torch_floor
    return floor is None or name is None or floor >= SINCE.get(name, (0,))


def check(ctx: FileContext) -> Iterator[Hit]:
    seen: set[int] = set()
    for call, _ in ctx.calls:
        qual = ctx.qualname(call.func)
        if qual in DEPRECATED and _actionable(ctx, call, qual.rsplit(".", 1)[-1]):
            seen.add(id(call.func))
            yield Hit(call, _message(qual))
    for stmt, _ in ctx.stmts:
        if (isinstance(stmt, ast.ImportFrom) and stmt.module in MODULES and not stmt.level
                and all(_actionable(ctx, stmt, a.name) for a in stmt.names)):
            yield Hit(stmt, f"`from {stmt.module} import ...` is deprecated: import from `torch.amp` "
                            "and pass the device type")
        elif isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)):
            for dec in stmt.decorator_list:  # bare ``@torch.cuda.amp.custom_fwd``
                qual = ctx.qualname(dec)
                if qual in DEPRECATED and id(dec) not in seen and _actionable(ctx, dec, qual.rsplit(".", 1)[-1]):
                    yield Hit(dec, _message(qual))
