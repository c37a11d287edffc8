"""GD410: the script switches off NCCL's fast transports (P2P over NVLink/PCIe, InfiniBand)."""

from __future__ import annotations

from collections.abc import Iterator

from gpudoctor.lint.envvars import env_sets
from gpudoctor.lint.rules.base import Hit
from gpudoctor.lint.scope import FileContext

CODE = "GD410"
NAME = "nccl-transport-disabled"
SEVERITY = "warning"
FIXABLE = False
MESSAGE = (
    "NCCL transport disabled in code: all-reduce falls back to a slower path; set it only to work"
    " around a broken link"
)
RATIONALE = (
    "`NCCL_P2P_DISABLE=1` stops GPUs from talking over NVLink or PCIe peer-to-peer, so every "
    "all-reduce goes through host memory; `NCCL_IB_DISABLE=1` makes multi-node jobs use TCP "
    "sockets instead of InfiniBand/RoCE. Blog recipes set them 'for stability', and DDP then "
    "scales far worse than it should. They are workarounds for a broken link or driver, to be set"
    " in the launch environment while debugging (check `nvidia-smi topo -m` and "
    "`NCCL_DEBUG=INFO`), not hard-coded in the training script."
)
BAD = "os.environ[\"NCCL_P2P_DISABLE\"] = \"1\"\n"
GOOD = ("# leave NCCL's transport choice alone; debug with NCCL_DEBUG=INFO when needed\n"
        "os.environ.setdefault(\"NCCL_DEBUG\", \"WARN\")\n")
NAMES = frozenset({"NCCL_P2P_DISABLE", "NCCL_IB_DISABLE", "NCCL_SHM_DISABLE"})


def check(ctx: FileContext) -> Iterator[Hit]:
    for name, value, node in env_sets(ctx, NAMES):
        if value.strip() == "1":
            yield Hit(node, f"`{name}=1` set in code: NCCL falls back to a slower transport and DDP scales "
                            "worse; set it only in the launch environment to work around a broken link")
