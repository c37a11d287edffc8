"""GD902 (off by default): a DataLoader with workers but without ``persistent_workers=True``."""

from __future__ import annotations

from collections.abc import Iterator

from gpudoctor.lint.rules.base import Hit
from gpudoctor.lint.scope import FileContext, has_star_kwargs, is_const, kwarg

CODE = "GD902"
NAME = "persistent-workers-unset"
SEVERITY = "info"
FIXABLE = False
MESSAGE = "DataLoader workers are restarted every epoch: pass persistent_workers=True"
RATIONALE = (
    "Without `persistent_workers=True` a DataLoader with workers shuts them down at the end of "
    "each epoch and forks new ones at the start of the next, re-importing and re-building the "
    "dataset in each; with many workers or short epochs the pause is visible. Off by default "
    "(`--select GD902`) because single-epoch and evaluation loaders do not care."
)
BAD = "loader = DataLoader(ds, batch_size=64, num_workers=8, pin_memory=True)\n"
GOOD = "loader = DataLoader(ds, batch_size=64, num_workers=8, pin_memory=True, persistent_workers=True)\n"


def check(ctx: FileContext) -> Iterator[Hit]:
    for call, _ in ctx.calls:
        if not (ctx.qualname(call.func) or "").startswith("torch.utils.data") or has_star_kwargs(call):
            continue
        workers = kwarg(call, "num_workers")
        if (ctx.qualname(call.func) or "").endswith("DataLoader") and workers is not None:
            if not is_const(workers, 0) and kwarg(call, "persistent_workers") is None:
                yield Hit(call)
