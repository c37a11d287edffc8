"""What the ranks of a run have written into its directory so far: steps, ranks, configs.

The parent reads these while the child trains (to watch for stalls and to end the run) and
when it writes the manifest (:func:`gpudoctor.collectors.launch.run_instrumented`).
"""

from __future__ import annotations

from pathlib import Path

from gpudoctor.records.base import SchemaError, read_json
from gpudoctor.records.run import RankConfig
from gpudoctor.records.rundir import KIND_CONFIG, read_steps


def steps_per_rank(run_dir: Path) -> dict[int, int]:
    counts: dict[int, int] = {}
    for path in sorted(run_dir.glob("steps-rank*.jsonl")):
        rank = int(path.stem.removeprefix("steps-rank"))
        try:
            counts[rank] = len(read_steps(path))
        except (SchemaError, OSError):
            counts[rank] = 0
    return counts


def ranks(run_dir: Path) -> list[int]:
    ranks = set()
    for path in run_dir.glob("*-rank*.json*"):
        tail = path.name.split("-rank", 1)[1].split(".", 1)[0]
        if tail.isdigit():
            ranks.add(int(tail))
    return sorted(ranks)


def configs(run_dir: Path) -> list[RankConfig]:
    """The rank configs written so far (each rank writes its own at its first step)."""
    out = []
    for path in run_dir.glob("config-rank*.json"):
        try:
            out.append(read_json(path, RankConfig, kind=KIND_CONFIG))
        except (SchemaError, OSError):
            continue
    return out


def pid_ranks(run_dir: Path) -> dict[int, int]:
    """pid -> rank, from the rank configs."""
    return {config.pid: config.rank for config in configs(run_dir)}


def world_size(run_dir: Path, ranks: list[int]) -> int | None:
    """The job's world size: the ranks' own (under torchrun --nnodes N this node records only
    its ranks, a part of the world), else the ranks recorded here."""
    return max([c.world_size for c in configs(run_dir)] + [len(ranks)]) or None


__all__ = ["configs", "pid_ranks", "ranks", "steps_per_rank", "world_size"]
