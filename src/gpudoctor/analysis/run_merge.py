"""One run out of the run directories of a multi-node job (``gpudoctor diagnose DIR DIR ...``).

Under ``torchrun --nnodes N`` each node runs its own ``gpudoctor run``, and its run directory
holds the files of the ranks on that node, named by global rank (``steps-rank2.jsonl``). Merged,
the ranks' records sit side by side as on one node; the manifest covers every rank; the GPU and
host samples stay those of the directory holding the lowest rank (GPU indices repeat across
nodes, so mixing them would average two different GPUs), which a note says. Pure: loaded runs
in, a run out; it writes nothing.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from gpudoctor.records.rundir import RunData

# a merged run ended as badly as its worst node: a crash anywhere is the job's crash
_STATUS_ORDER = ("completed", "stopped", "no_steps", "interrupted", "timeout", "stalled", "crashed")


class MergeError(ValueError):
    """The directories are not the nodes of one job (a rank twice, another world size)."""


def merge_runs(runs: Sequence[RunData]) -> RunData:
    """The runs of one job's nodes as one run. Raises :class:`MergeError` saying what clashes."""
    if len(runs) == 1:
        return runs[0]
    ordered = sorted(runs, key=lambda r: min(r.ranks, default=1 << 30))
    owner: dict[int, RunData] = {}
    for run in ordered:
        for rank in run.ranks:
            if rank in owner:
                raise MergeError(f"rank {rank} is recorded in both {owner[rank].path} and {run.path}: "
                                 "these are not the nodes of one job (or the same node twice)")
            owner[rank] = run
    worlds = {c.world_size for run in ordered for c in run.configs.values()}
    if len(worlds) > 1:
        raise MergeError(f"the rank configs disagree on the world size ({sorted(worlds)}): "
                         "these directories come from different jobs")
    first = ordered[0]
    merged = dataclasses.replace(first, configs={}, steps={}, windows={}, memory={}, stacks={},
                                 findings=None, findings_version="")
    for run in ordered:
        merged.configs.update(run.configs)
        merged.steps.update(run.steps)
        merged.windows.update(run.windows)
        merged.memory.update(run.memory)
        merged.stacks.update(run.stacks)
    merged.manifest = _manifest(ordered, worlds)
    return merged


def _manifest(ordered: Sequence[RunData], worlds: set[int]):
    first = ordered[0].manifest
    ranks = sorted(r for run in ordered for r in run.ranks)
    steps = {}
    for run in ordered:
        steps.update(zip(run.manifest.ranks, run.manifest.steps_recorded))
    status = max((run.manifest.status for run in ordered),
                 key=lambda s: _STATUS_ORDER.index(s) if s in _STATUS_ORDER else -1)
    where = "; ".join(f"{run.path} ({run.manifest.hostname or 'host ?'}: ranks "
                      f"{', '.join(map(str, run.ranks))})" for run in ordered)
    notes = [f"merged from {len(ordered)} run directories: {where}",
             f"GPU and host samples: {ordered[0].manifest.hostname or ordered[0].path} only (the node "
             "of the lowest rank); the other nodes' are in their own run directories"]
    said: dict[str, list[str]] = {}  # a note every node made is said once
    for run in ordered:
        for note in run.manifest.notes:
            said.setdefault(note, []).append(run.manifest.hostname or str(run.path))
    notes += [note if len(hosts) == len(ordered) else f"{', '.join(hosts)}: {note}"
              for note, hosts in said.items()]
    errors = [run.manifest.error for run in ordered if run.manifest.error]
    codes = [run.manifest.exit_code for run in ordered if run.manifest.exit_code]
    ended = [run.manifest.ended_at for run in ordered if run.manifest.ended_at is not None]
    return dataclasses.replace(
        first, ranks=tuple(ranks), steps_recorded=tuple(steps.get(r, 0) for r in ranks),
        world_size=max([*worlds, len(ranks)]), status=status, notes=tuple(notes),
        hostname=", ".join(dict.fromkeys(run.manifest.hostname for run in ordered if run.manifest.hostname)),
        started_at=min(run.manifest.started_at for run in ordered),
        ended_at=max(ended) if ended else None,
        exit_code=codes[0] if codes else first.exit_code, error="\n".join(errors)[-4000:])
