"""OOM snapshots: reduce PyTorch's snapshot mapping, group live bytes by site, tell the verdict."""

from __future__ import annotations

from gpudoctor.analysis.oom import UNKNOWN_SITE, explain_oom, top_sites
from gpudoctor.core.memory_history import reduce_snapshot
from gpudoctor.records.memory import LiveBlock, OomSnapshot

GIB = 1 << 30

# the shape of torch.cuda.memory._snapshot(), trimmed to the keys gpudoctor reads
SNAPSHOT = {
    "segments": [
        {"device": 0, "stream": 0, "total_size": 6 * GIB, "blocks": [
            {"size": 4 * GIB, "state": "active_allocated", "frames": [
                {"filename": "??", "line": 0, "name": "c10::cuda::CUDACachingAllocator"},
                {"filename": "/home/me/project/train.py", "line": 41, "name": "forward"},
                {"filename": "/home/me/project/train.py", "line": 90, "name": "main"}]},
            {"size": 2 * GIB, "state": "inactive", "frames": []},
        ]},
        {"device": 0, "stream": 0, "total_size": 1 * GIB, "blocks": [
            {"size": 1 * GIB, "state": "active_allocated", "frames": [
                {"filename": "/usr/lib/python3/site-packages/torch/optim/adamw.py", "line": 5,
                 "name": "_init_group"},
                {"filename": "/home/me/project/train.py", "line": 95, "name": "main"}]},
        ]},
        {"device": 1, "stream": 0, "total_size": 9 * GIB, "blocks": [
            {"size": 9 * GIB, "state": "active_allocated", "frames": []}]},
    ]
}


def test_reduce_snapshot_keeps_live_blocks_of_the_device_and_user_frames() -> None:
    snap = reduce_snapshot(SNAPSHOT, device=0, requested_bytes=3 * GIB, device_free_bytes=GIB // 2,
                           device_total_bytes=80 * GIB,
                           stats={"inactive_split_bytes.all.current": 123, "num_alloc_retries": 4})
    assert snap.allocated_bytes == 5 * GIB and snap.reserved_bytes == 7 * GIB
    assert [b.frames[0] for b in snap.blocks] == ["/home/me/project/train.py:41 forward", "/home/me/project/train.py:95 main"]
    assert snap.inactive_split_bytes == 123 and snap.alloc_retries == 4


def _snap(requested: int, reserved: int) -> OomSnapshot:
    return OomSnapshot(
        device=0, requested_bytes=requested, allocated_bytes=5 * GIB, reserved_bytes=reserved,
        device_free_bytes=GIB // 4, device_total_bytes=80 * GIB,
        blocks=(LiveBlock(size_bytes=4 * GIB, frames=("train.py:41 forward",)),
                LiveBlock(size_bytes=GIB, frames=())),
    )


def test_top_sites_by_bytes() -> None:
    sites = top_sites(_snap(GIB, 5 * GIB))
    assert [(s.site, s.bytes, round(s.share, 2)) for s in sites] == [
        ("train.py:41 forward", 4 * GIB, 0.8), (UNKNOWN_SITE, GIB, 0.2)]


def test_fragmentation_when_the_cache_could_hold_the_request() -> None:
    (finding,) = explain_oom(_snap(2 * GIB, 8 * GIB))
    assert finding.code == "GD-OOM-FRAGMENTATION"
    assert "expandable_segments:True" in finding.fix
    assert "3.0 GiB free in its cache" in finding.title


def test_shortage_otherwise_with_ranked_fixes() -> None:
    (finding,) = explain_oom(_snap(2 * GIB, 5 * GIB + GIB // 2))
    assert finding.code == "GD-OOM-SHORTAGE"
    assert finding.fix.index("micro-batch") < finding.fix.index("checkpoint")
    assert any("4.0 GiB (80%) live from train.py:41 forward" in e for e in finding.evidence)
