"""GD504: ``CUDA_LAUNCH_BLOCKING=1`` set by the training script itself."""

from __future__ import annotations

from collections.abc import Iterator

from gpudoctor.lint.envvars import env_sets
from gpudoctor.lint.rules.base import Hit
from gpudoctor.lint.scope import FileContext

CODE = "GD504"
NAME = "cuda-launch-blocking"
SEVERITY = "warning"
FIXABLE = False
MESSAGE = (
    "CUDA_LAUNCH_BLOCKING=1 set in code makes every kernel launch synchronous: use it on the "
    "command line while debugging only"
)
RATIONALE = (
    "`CUDA_LAUNCH_BLOCKING=1` makes the CPU wait for every kernel to finish before launching the "
    "next, which pins a CUDA error to the Python line that caused it (the seeds' first step for "
    "'device-side assert triggered') and slows training several-fold. Left in the script it "
    "silently costs that on every run; pass it on the command line for the debugging run instead."
    " Test modules (`test_*.py`, `*_test.py`, `conftest.py`) are skipped: they make launches blocking for bit-exact comparisons."
)
BAD = "os.environ[\"CUDA_LAUNCH_BLOCKING\"] = \"1\"\n"
GOOD = "# debugging run only:  CUDA_LAUNCH_BLOCKING=1 python train.py\n"


def check(ctx: FileContext) -> Iterator[Hit]:
    if ctx.is_test:  # a test makes launches blocking for bit-exact comparisons; speed is not its concern
        return
    for _, value, node in env_sets(ctx, frozenset({"CUDA_LAUNCH_BLOCKING"})):
        if value.strip() == "1":
            yield Hit(node)
