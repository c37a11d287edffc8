"""GD413: a shell launch script using ``torch.distributed.launch`` or hard-coding NCCL/rank variables."""

from __future__ import annotations

import re
from collections.abc import Iterator

CODE = "GD413"
NAME = "shell-launch-script"
SEVERITY = "warning"
FIXABLE = False
KIND = "sh"
MESSAGE = "launch script problem: use torchrun and let it set the rank variables"
RATIONALE = (
    "`python -m torch.distributed.launch` is deprecated (it passes `--local-rank` as an argument "
    "and is removed in recent releases): use `torchrun --nproc_per_node=N train.py`, which sets "
    "`RANK`, `LOCAL_RANK`, `WORLD_SIZE`, `MASTER_ADDR` and `MASTER_PORT` for every process. "
    "Exporting `RANK`/`LOCAL_RANK` as a fixed number in a script that starts several processes "
    "by hand (`python train.py &` several times, WORLD_SIZE above 1, no torchrun/srun/mpirun to "
    "set each one's rank) gives every process"
    " the same rank (duplicate-rank hangs or 'Duplicate GPU detected'), and a hard-coded "
    "`NCCL_P2P_DISABLE=1`/`NCCL_IB_DISABLE=1`/`NCCL_SHM_DISABLE=1` copied from a forum post turns "
    "off the fast transports on every machine the script ever runs on (about 10x slower "
    "all-reduce): keep such switches out of the script, set them per machine when a measurement "
    "shows they help. A value taken from the scheduler (`RANK=$SLURM_PROCID`) is fine."
)
BAD = "export NCCL_P2P_DISABLE=1\npython -m torch.distributed.launch --nproc_per_node=8 train.py\n"
GOOD = "torchrun --nproc_per_node=8 train.py\n"

_LAUNCH = re.compile(r"(?:^|[\s;&|(])(?:python[0-9.]*|\S*/python[0-9.]*)\s+(?:-\S+\s+)*-m\s+torch\.distributed\.launch\b")
_WORLD = re.compile(r"(?:WORLD_SIZE=[\"']?|--nproc[_-]per[_-]node[= ]\s*)([2-9]|[1-9]\d+)\b")
_EXPORT = re.compile(r"(?:^|[\s;&])(?P<export>export\s+)?(?P<name>RANK|LOCAL_RANK|"
                     r"NCCL_(?:P2P|IB|SHM)_DISABLE)=(?P<value>[\"']?\d+[\"']?)(?=\s|;|$)")


_LAUNCHER = re.compile(r"\b(?:torchrun|torch\.distributed\.(?:launch|run)|srun|mpirun|deepspeed|accelerate)\b")
_QUOTED = re.compile(r"\"[^\"]*\"|'[^']*'")


def _several_by_hand(ctx) -> bool:
    """The script starts several training processes itself (``python train.py &``, or WORLD_SIZE
    above 1 with no launcher anywhere), so nothing gives each one its own rank."""
    for line in ctx.lines:
        if re.search(r"python\S*\s.*&\s*$", line.text) and not _LAUNCHER.search(line.text):
            return True
    return bool(_WORLD.search(ctx.source)) and not _LAUNCHER.search(ctx.source)


def check(ctx) -> Iterator[tuple[int, int, str | None]]:
    for line in ctx.lines:
        launch = _LAUNCH.search(_QUOTED.sub('""', line.text))
        if launch:
            yield line.line, line.col, ("`python -m torch.distributed.launch` is deprecated: use "
                                        "`torchrun --nproc_per_node=N script.py` (it sets RANK/LOCAL_RANK)")
        for match in _EXPORT.finditer(line.text):
            name, value = match.group("name"), match.group("value").strip("\"'")
            if name.startswith("NCCL_"):
                if value != "0":
                    yield line.line, line.col, (f"`{name}={value}` hard-coded in a launch script turns off a "
                                                "fast NCCL transport on every machine: set it per machine, "
                                                "only when a measurement shows it helps")
            elif match.group("export") and _several_by_hand(ctx):  # ``LOCAL_RANK=1 python x &``: per process
                # several processes: a fixed rank is shared by all of them (a single-process
                # ``RANK=0 WORLD_SIZE=1 python train.py`` debug run is fine)
                yield line.line, line.col, (f"`{name}={value}` hard-coded: every process started by this "
                                            "script gets the same value; let torchrun (or the scheduler) set it")
