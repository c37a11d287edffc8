"""``check --cluster``: what differs between the nodes (and ranks) of a torchrun job.

Each rank's frozen environment is compared with rank 0's by :func:`gpudoctor.analysis.env_diff.diff`
(the comparison ``--against`` makes, with its verdicts, reasons and ``changes`` marking), then the
values are regrouped by the nodes holding them. GPU clocks and power limits, which a frozen
environment does not hold, are compared here. Pure: records in, records out.
"""

from __future__ import annotations

from collections.abc import Sequence

from gpudoctor.analysis.env_diff import SPEED, diff
from gpudoctor.records.cluster import GpuClocks, NodeDifference, NodeSummary, RankEnv
from gpudoctor.records.env import Verdict

_ORDER = (Verdict.SKIP, Verdict.PASS, Verdict.WARN, Verdict.FAIL)
CLOCKS_FIELD = "GPU clocks"
CLOCKS_WHY = ("lower application clocks or a lower power limit: that node's GPUs run slower and "
              "every rank waits for it at each all-reduce")


def nodes_of(ranks: Sequence[RankEnv]) -> tuple[NodeSummary, ...]:
    """The nodes of the job (torchrun's GROUP_RANK), each with its host and ranks, by node."""
    by_node: dict[int, list[RankEnv]] = {}
    for env in sorted(ranks, key=lambda e: e.rank):
        by_node.setdefault(env.node, []).append(env)
    return tuple(NodeSummary(node=n, hostname=envs[0].hostname, ranks=tuple(e.rank for e in envs))
                 for n, envs in sorted(by_node.items()))


def number_list(numbers: Sequence[int]) -> str:
    """``[0, 1, 2, 5]`` -> ``"0-2, 5"``."""
    out: list[str] = []
    nums = sorted(set(numbers))
    i = 0
    while i < len(nums):
        j = i
        while j + 1 < len(nums) and nums[j + 1] == nums[j] + 1:
            j += 1
        out.append(str(nums[i]) if j == i else f"{nums[i]}-{nums[j]}" if j > i + 1
                   else f"{nums[i]}, {nums[j]}")
        i = j + 1
    return ", ".join(out)


def label(ranks: Sequence[int], nodes: Sequence[NodeSummary]) -> str:
    """Name a set of ranks by whole nodes where it covers them: ``"nodes 0, 2; node 1 rank 3"``."""
    chosen = set(ranks)
    whole = [n.node for n in nodes if set(n.ranks) <= chosen]
    parts = [("node " if len(whole) == 1 else "nodes ") + number_list(whole)] if whole else []
    for n in nodes:
        picked = [r for r in n.ranks if r in chosen]
        if picked and n.node not in whole:
            parts.append(f"node {n.node} rank{'s' if len(picked) > 1 else ''} {number_list(picked)}")
    return "; ".join(parts)


def clocks_text(clocks: Sequence[GpuClocks], error: str = "") -> str:
    """One node's clocks in words, identical GPUs counted.

    ``"8 × SM 1980 of 1980 MHz, memory 3201 MHz, 700 W"``: the application SM clock of the
    maximum, the maximum memory clock, the enforced power limit.
    """
    if not clocks:
        return f"not read ({error})" if error else "no GPU"
    counts: dict[str, int] = {}
    for c in clocks:
        sm = f"SM {_mhz(c.sm_app_mhz)} of {_mhz(c.sm_max_mhz)} MHz"
        mem = f"memory {_mhz(c.mem_max_mhz)} MHz"
        power = f"{c.power_limit_w:.0f} W" if c.power_limit_w is not None else "? W"
        key = f"{sm}, {mem}, {power}"
        counts[key] = counts.get(key, 0) + 1
    return "; ".join(f"{n} × {key}" for key, n in counts.items())


def _mhz(value: int | None) -> str:
    return "?" if value is None else str(value)


# The order of the comparison's rows: as --against lists them, clocks next to the GPUs.
_FIRST = ("gpu", CLOCKS_FIELD, "torch variant", "torch", "driver CUDA", "driver", "cuDNN", "NCCL", "python")


def _order(field: str) -> tuple[int, str]:
    if field in _FIRST:
        return _FIRST.index(field), ""
    group = 1 if field.startswith("package ") else 2 if field.startswith("env ") else 3
    return len(_FIRST) + group, field


def compare(ranks: Sequence[RankEnv]) -> tuple[NodeDifference, ...]:
    """Every field whose value is not the same on all ranks, each value labelled by its nodes.

    Values come from ``diff(rank, rank 0)``; the verdict is the worst any rank drew.
    """
    ordered = sorted(ranks, key=lambda e: e.rank)
    if len(ordered) < 2:
        return ()
    nodes = nodes_of(ordered)
    ref = ordered[0]
    fields: dict[str, dict] = {}
    for env in ordered[1:]:
        for d in diff(env.frozen, ref.frozen):
            # --against's words name the frozen file's build; here it is rank 0's
            why = d.why.replace("the frozen torch build", "rank 0's torch build")
            entry = fields.setdefault(d.field, {"ref": d.there, "values": {}, "verdict": d.verdict,
                                                "why": why, "changes": d.changes})
            entry["values"][env.rank] = d.here
            if _ORDER.index(d.verdict) > _ORDER.index(entry["verdict"]):
                entry["verdict"] = d.verdict
    clock_values = {e.rank: clocks_text(e.clocks, e.clocks_error) for e in ordered}
    if len(set(clock_values.values())) > 1:
        fields[CLOCKS_FIELD] = {"ref": clock_values[ref.rank], "verdict": Verdict.WARN, "why": CLOCKS_WHY,
                                "changes": SPEED, "values": {r: v for r, v in clock_values.items()
                                                             if v != clock_values[ref.rank]}}
    out = []
    for name, entry in sorted(fields.items(), key=lambda item: _order(item[0])):
        by_value: dict[str, list[int]] = {}
        for env in ordered:
            by_value.setdefault(entry["values"].get(env.rank, entry["ref"]), []).append(env.rank)
        out.append(NodeDifference(field=name, verdict=entry["verdict"], why=entry["why"],
                                  changes=entry["changes"],
                                  values=tuple((label(rs, nodes), v) for v, rs in by_value.items())))
    return tuple(out)
