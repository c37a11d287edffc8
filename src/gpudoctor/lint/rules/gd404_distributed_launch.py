"""GD404: the deprecated ``torch.distributed.launch`` launcher."""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator

from gpudoctor.lint.rules.base import Hit
from gpudoctor.lint.scope import FileContext

CODE = "GD404"
NAME = "distributed-launch"
SEVERITY = "warning"
FIXABLE = False
MESSAGE = "`torch.distributed.launch` is deprecated: use `torchrun` and read LOCAL_RANK from the environment"
RATIONALE = (
    "`python -m torch.distributed.launch` is deprecated in favour of `torchrun`, which sets "
    "`RANK`, `LOCAL_RANK` and `WORLD_SIZE` in the environment (no `--local_rank` argument), "
    "restarts failed workers and supports elastic rendezvous. Replace the command with `torchrun "
    "--nproc_per_node=N train.py` and use `int(os.environ[\"LOCAL_RANK\"])`. Test modules holding "
    "tests, which build the launcher command they test (an old-torch fallback included), are skipped."
)
BAD = "cmd = [sys.executable, \"-m\", \"torch.distributed.launch\", \"--nproc_per_node=2\", \"train.py\"]\n"
GOOD = "cmd = [\"torchrun\", \"--nproc_per_node=2\", \"train.py\"]\n"
TARGET = "torch.distributed.launch"
_COMMAND = re.compile(r"-m\s+torch\.distributed\.launch\b(?!\.)")


def _is_module(name: str | None) -> bool:
    return name == TARGET or (name or "").startswith(TARGET + ".")


def _is_command(text: str) -> bool:
    """``"torch.distributed.launch"`` as a ``-m`` argument, or a command line running it."""
    return text.strip() == TARGET or _COMMAND.search(text) is not None


def check(ctx: FileContext) -> Iterator[Hit]:
    if TARGET not in ctx.source or ctx.holds_tests:  # a test builds the launcher command it tests
        return
    docstrings = {id(s.value) for s, _ in ctx.stmts if isinstance(s, ast.Expr)}
    for node in ast.walk(ctx.tree):
        if id(node) in docstrings:
            continue  # prose that mentions the launcher is not a use of it
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and _is_command(node.value):
            yield Hit(node)
        elif isinstance(node, ast.Import) and any(_is_module(a.name) for a in node.names):
            yield Hit(node)
        elif isinstance(node, ast.ImportFrom) and _is_module(node.module):
            yield Hit(node)
