"""Record the CUDA allocator's history and, on an out-of-memory error, dump what was live.

Uses PyTorch's own tools: ``torch.cuda.memory._record_memory_history`` (allocation stacks) and
an out-of-memory observer that dumps ``torch.cuda.memory._snapshot()`` as a pickle for PyTorch's
memory viewer plus a reduced :class:`OomSnapshot` (live blocks with their Python frames) as JSON
for gpudoctor's analysis. Recording stacks costs host time on every allocation: enable it for
memory diagnosis, not for speed measurements.
"""

from __future__ import annotations

import dataclasses
import pickle
from collections.abc import Callable
from pathlib import Path
from typing import Any

from gpudoctor.records.base import write_json
from gpudoctor.records.memory import LiveBlock, OomSnapshot

KIND_OOM = "oom_snapshot"
MAX_FRAMES = 8


def start_history(max_entries: int = 100_000) -> bool:
    """Start recording allocations with Python stacks; ``False`` when CUDA is not available."""
    import torch

    if not torch.cuda.is_available():
        return False
    torch.cuda.memory._record_memory_history(
        enabled="all", context="all", stacks="python", max_entries=max_entries
    )
    return True


def stop_history() -> None:
    import torch

    if torch.cuda.is_available():
        torch.cuda.memory._record_memory_history(enabled=None)


def _frames(frames: list[dict[str, Any]]) -> tuple[str, ...]:
    out = []
    for frame in frames:
        filename = str(frame.get("filename", "?"))
        if filename.startswith("??") or "/torch/" in filename and "/torch/nn/modules/" not in filename:
            continue  # C++ frames and torch internals say little about *your* code
        out.append(f"{filename}:{frame.get('line', '?')} {frame.get('name', '?')}")
        if len(out) >= MAX_FRAMES:
            break
    return tuple(out)


def reduce_snapshot(
    snapshot: dict[str, Any], *, device: int, requested_bytes: int, device_free_bytes: int,
    device_total_bytes: int, stats: dict[str, Any] | None = None,
) -> OomSnapshot:
    """Reduce a ``torch.cuda.memory._snapshot()`` mapping to the live blocks of ``device``."""
    blocks: list[LiveBlock] = []
    reserved = 0
    for segment in snapshot.get("segments", []):
        if segment.get("device", device) != device:
            continue
        reserved += int(segment.get("total_size", 0))
        for block in segment.get("blocks", []):
            if block.get("state") != "active_allocated":
                continue
            blocks.append(LiveBlock(
                size_bytes=int(block.get("size", 0)),
                frames=_frames(block.get("frames", [])),
                stream=int(segment.get("stream", 0)),
            ))
    stats = stats or {}
    return OomSnapshot(
        device=device,
        requested_bytes=requested_bytes,
        allocated_bytes=sum(b.size_bytes for b in blocks),
        reserved_bytes=reserved,
        device_free_bytes=device_free_bytes,
        device_total_bytes=device_total_bytes,
        blocks=tuple(blocks),
        inactive_split_bytes=int(stats.get("inactive_split_bytes.all.current", 0) or 0),
        alloc_retries=int(stats.get("num_alloc_retries", 0) or 0),
    )


def attach_oom_dump(out_dir: Path, *, on_dump: Callable[[Path], None] | None = None) -> bool:
    """On the next out-of-memory error, write ``oom-snapshot.pickle`` and ``oom.json`` to ``out_dir``.

    The observer runs inside the failing allocation, before ``torch.OutOfMemoryError`` is raised,
    so what it records is exactly what was live. Returns ``False`` without CUDA.
    """
    import torch

    if not torch.cuda.is_available():
        return False
    out_dir = Path(out_dir)
    done = False

    def observer(device: int, alloc: int, device_allocated: int, device_free: int) -> None:
        nonlocal done
        if done:
            return
        done = True
        snapshot = torch.cuda.memory._snapshot()
        pickle_path = out_dir / "oom-snapshot.pickle"
        with open(pickle_path, "wb") as fh:
            pickle.dump(snapshot, fh)
        total = torch.cuda.get_device_properties(device).total_memory
        reduced = reduce_snapshot(
            snapshot, device=device, requested_bytes=int(alloc), device_free_bytes=int(device_free),
            device_total_bytes=int(total), stats=torch.cuda.memory_stats(device),
        )
        reduced = dataclasses.replace(reduced, pickle_path=str(pickle_path))
        write_json(out_dir / "oom.json", reduced, kind=KIND_OOM)
        if on_dump is not None:
            on_dump(out_dir / "oom.json")

    torch._C._cuda_attach_out_of_memory_observer(observer)
    return True
