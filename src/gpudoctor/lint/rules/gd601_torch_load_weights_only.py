"""GD601: ``torch.load`` without ``weights_only=True``."""

from __future__ import annotations

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
    "explicit `weights_only=False` is reported there."
)
BAD = "state = torch.load(\"ckpt.pt\", map_location=\"cpu\")\n"
GOOD = "state = torch.load(\"ckpt.pt\", map_location=\"cpu\", weights_only=True)\n"


SAFE_DEFAULT = (2, 6)  # torch.load's weights_only defaults to True from PyTorch 2.6


def check(ctx: FileContext) -> Iterator[Hit]:
    safe_default = ctx.torch_floor is not None and ctx.torch_floor >= SAFE_DEFAULT
    for call, _ in ctx.calls:
        if ctx.qualname(call.func) == "torch.load" and not has_star_kwargs(call):
            value = kwarg(call, "weights_only")
            if value is None and not safe_default:
                yield Hit(call)
            elif is_const(value, False):
                yield Hit(call, "`torch.load(weights_only=False)` can run arbitrary code from the file: "
                                "use weights_only=True unless the file is fully trusted")
