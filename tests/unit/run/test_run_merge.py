"""``diagnose DIR DIR``: the run directories of a multi-node job's nodes diagnosed as one run.

A recorded 2-GPU run, split as two nodes would have recorded it (rank 0's files in one directory,
rank 1's in the other), merges back into a run with the same diagnosis as the whole one.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from gpudoctor.analysis.diagnose import diagnose
from gpudoctor.analysis.run_merge import MergeError, merge_runs
from gpudoctor.records.rundir import RunData, load_run

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "runs"


def _split(run: RunData, rank: int, host: str, **manifest) -> RunData:
    """What the node running only ``rank`` would have recorded (node 0 keeps the GPU samples)."""
    keep = lambda d: {r: v for r, v in d.items() if r == rank}  # noqa: E731
    m = run.manifest
    steps = dict(zip(m.ranks, m.steps_recorded))
    return dataclasses.replace(
        run, path=Path(f"/nodes/{host}/run"), configs=keep(run.configs), steps=keep(run.steps),
        windows=keep(run.windows), memory=keep(run.memory), stacks=keep(run.stacks),
        gpu=run.gpu if rank == 0 else [], host=run.host if rank == 0 else [], findings=None,
        manifest=dataclasses.replace(m, ranks=(rank,), steps_recorded=(steps[rank],), hostname=host,
                                     **manifest))


@pytest.mark.parametrize("name", ["straggler-2gpu", "ddp_no_set_epoch-2gpu"])
def test_split_nodes_merge_back_to_the_same_diagnosis(name):
    whole = load_run(FIXTURES / name)
    nodes = [_split(whole, 1, "node-b"), _split(whole, 0, "node-a")]  # any order
    merged = merge_runs(nodes)
    assert merged.ranks == whole.ranks and merged.manifest.ranks == whole.manifest.ranks
    assert merged.manifest.steps_recorded == whole.manifest.steps_recorded
    assert merged.manifest.world_size == 2 and merged.manifest.hostname == "node-a, node-b"
    assert merged.manifest.notes[0] == ("merged from 2 run directories: /nodes/node-a/run (node-a: ranks 0); "
                                        "/nodes/node-b/run (node-b: ranks 1)")
    assert [(f.code, f.severity) for f in diagnose(merged)] == [(f.code, f.severity) for f in diagnose(whole)]
    assert nodes[1].findings is None and merged.path == nodes[1].path  # the inputs are not changed


def test_the_worst_status_and_every_error_are_kept():
    whole = load_run(FIXTURES / "straggler-2gpu")
    crashed = _split(whole, 1, "node-b", status="crashed", exit_code=1, error="RuntimeError: NCCL timeout")
    merged = merge_runs([_split(whole, 0, "node-a"), crashed])
    assert merged.manifest.status == "crashed" and merged.manifest.exit_code == 1
    assert "NCCL timeout" in merged.manifest.error


def test_a_rank_twice_or_another_world_is_refused():
    whole = load_run(FIXTURES / "straggler-2gpu")
    with pytest.raises(MergeError, match="rank 0 is recorded in both"):
        merge_runs([_split(whole, 0, "node-a"), _split(whole, 0, "node-b")])
    other = _split(whole, 1, "node-b")
    other = dataclasses.replace(other, configs={1: dataclasses.replace(other.configs[1], world_size=4)})
    with pytest.raises(MergeError, match="world size"):
        merge_runs([_split(whole, 0, "node-a"), other])
