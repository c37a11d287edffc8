"""Record the CUDA allocator's history and, on an out-of-memory error, dump what was live.

Uses PyTorch's own tools: ``torch.cuda.memory._record_memory_history`` (allocation stacks) and
an out-of-memory observer that dumps ``torch.cuda.memory._snapshot()`` as a pickle for PyTorch's
memory viewer plus a reduced :class:`OomSnapshot` (live blocks with their Python frames) as JSON
for gpudoctor's analysis (``gpudoctor memory show FILE``). Recording stacks costs host time on
every allocation: enable it for memory diagnosis, not for speed measurements. The observer alone
costs nothing until an allocation fails.

Files: ``oom.json`` + ``oom-snapshot.pickle`` for a whole process (``gpudoctor memory run``), or
``oom-rank{N}.json`` + ``oom-snapshot-rank{N}.pickle`` per rank (the engine), so that the ranks of
one job never overwrite each other.
"""

from __future__ import annotations

import dataclasses
import pickle
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

from gpudoctor.records.atomic import atomic_file
from gpudoctor.records.base import write_json
from gpudoctor.records.memory import LiveBlock, OomSnapshot
from gpudoctor.records.rundir import KIND_OOM, OOM, OOM_PICKLE, oom_files
from gpudoctor.records.units import human_bytes

MAX_FRAMES = 8
VIEWER_URL = "pytorch.org/memory_viz"


def oom_file_names(rank: int | None = None) -> tuple[str, str]:
    """``(json name, pickle name)``: per process when ``rank`` is None, else per rank."""
    if rank is None:
        return OOM, OOM_PICKLE
    return f"oom-rank{rank}.json", f"oom-snapshot-rank{rank}.pickle"


def find_oom_files(path: Path) -> list[Path]:
    """The OOM snapshot JSON files at ``path``: the file itself, or those in a folder (by rank).

    Raises:
        FileNotFoundError: nothing to read, worded with where the files come from.
    """
    path = Path(path)
    if path.is_file():
        return [path]
    if path.is_dir():
        found = oom_files(path)
        if found:
            return found
        raise FileNotFoundError(
            f"{path} holds no oom.json or oom-rank*.json; they are written at an out-of-memory error "
            "by the engine (robust.oom_snapshot) and by `gpudoctor memory run`"
        )
    raise FileNotFoundError(f"{path}: no such file or folder; pass an oom-rank0.json/oom.json or its folder")


def history_enabled() -> bool:
    """Whether the allocator is recording allocation history now (by anyone in this process)."""
    import torch

    if not torch.cuda.is_available():
        return False
    probe = getattr(torch._C, "_cuda_isHistoryEnabled", None)
    return bool(probe()) if probe is not None else False


def start_history(max_entries: int = 100_000) -> bool:
    """Start recording allocations with Python stacks; ``False`` when CUDA is not available.

    ``max_entries`` bounds the ring buffer of alloc/free events kept for the snapshot: the most
    recent ones, i.e. the last steps.
    """
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


class OomDump:
    """The out-of-memory observer :func:`attach_oom_dump` registers: writes the files on an OOM.

    The CUDA allocator calls it inside the failing allocation, before ``torch.OutOfMemoryError``
    is raised, so what it records is exactly what was live.

    Attributes:
        json_path: the reduced :class:`OomSnapshot` (allocated, reserved, free, live blocks).
        pickle_path: the full snapshot for PyTorch's viewer; written while ``write_pickle``.
        write_pickle: dump the full snapshot too (useful only while history is recorded: without
            it the snapshot has no allocation stacks and no timeline).
        once: dump the first OOM only (else every OOM overwrites the files: the last one wins).
        step: stored in the JSON (the caller keeps it current; ``None``: unknown).
        dumps: how many OOMs were written; ``last``: the last reduced snapshot.
        error: why the last dump failed (it never raises: the OOM error must stay the error).
    """

    def __init__(
        self, out_dir: Path, *, rank: int | None = None, once: bool = True, write_pickle: bool = True,
        on_dump: Callable[[Path], None] | None = None,
        snapshot_fn: Callable[[], dict[str, Any]] | None = None,
        stats_fn: Callable[[int], dict[str, Any]] | None = None,
    ) -> None:
        self.out_dir = Path(out_dir)
        json_name, pickle_name = oom_file_names(rank)
        self.json_path = self.out_dir / json_name
        self.pickle_path = self.out_dir / pickle_name
        self.once, self.write_pickle, self.on_dump = once, write_pickle, on_dump
        self.step: int | None = None
        self.dumps = 0
        self.last: OomSnapshot | None = None
        self.error = ""
        self._snapshot_fn, self._stats_fn = snapshot_fn, stats_fn

    def __call__(self, device: int, alloc: int, device_total: int, device_free: int) -> None:
        """The observer. ``device_total`` is what the allocator may use: the device's memory, or
        its share under ``torch.cuda.set_per_process_memory_fraction``."""
        if self.once and self.dumps:
            return
        try:
            self._dump(int(device), int(alloc), int(device_total), int(device_free))
        except Exception as exc:  # noqa: BLE001 - an exception here would replace the OOM error
            self.error = f"{type(exc).__name__}: {exc}"

    def _dump(self, device: int, alloc: int, device_total: int, device_free: int) -> None:
        import torch

        snapshot = (self._snapshot_fn or torch.cuda.memory._snapshot)()
        stats = (self._stats_fn or torch.cuda.memory_stats)(device)
        self.out_dir.mkdir(parents=True, exist_ok=True)
        pickle_path = ""
        if self.write_pickle:
            with atomic_file(self.pickle_path) as fh:
                pickle.dump(snapshot, fh)
            pickle_path = str(self.pickle_path)
        reduced = reduce_snapshot(snapshot, device=device, requested_bytes=alloc, device_free_bytes=device_free,
                                  device_total_bytes=device_total, stats=stats)
        reduced = dataclasses.replace(reduced, pickle_path=pickle_path, step=self.step)
        write_json(self.json_path, reduced, kind=KIND_OOM)
        self.dumps += 1
        self.last = reduced
        self.error = ""
        if self.on_dump is not None:
            self.on_dump(self.json_path)

    def detach(self) -> None:
        """Stop dumping (the allocator keeps one dispatching observer; this one leaves it)."""
        if self in _DUMPS:
            _DUMPS.remove(self)


# PyTorch can attach observers but never remove one: one dispatcher is attached per process and
# hands each OOM to the dumps attached now.
_DUMPS: list[OomDump] = []
_DISPATCHER_ATTACHED = False


def _dispatch(device: int, alloc: int, device_total: int, device_free: int) -> None:
    for dump in list(_DUMPS):
        dump(device, alloc, device_total, device_free)


def attach_oom_dump(
    out_dir: Path, *, on_dump: Callable[[Path], None] | None = None, rank: int | None = None,
    once: bool = True, write_pickle: bool = True,
) -> OomDump | None:
    """On an out-of-memory error, write the snapshot files (:func:`oom_file_names`) to ``out_dir``.

    Returns the :class:`OomDump` (``detach()`` it when done), or ``None`` without CUDA.
    """
    import torch

    if not torch.cuda.is_available():
        return None
    global _DISPATCHER_ATTACHED
    if not _DISPATCHER_ATTACHED:
        # The allocator registers observers with the per-device allocators it has: those exist
        # only once CUDA is initialised, so initialise it first (idempotent).
        torch.cuda.init()
        torch._C._cuda_attach_out_of_memory_observer(_dispatch)
        _DISPATCHER_ATTACHED = True
    dump = OomDump(out_dir, rank=rank, once=once, write_pickle=write_pickle, on_dump=on_dump)
    _DUMPS.append(dump)
    return dump


_TRIED = re.compile(r"Tried to allocate ([0-9.]+) ?(bytes|B|KiB|MiB|GiB|TiB)")
_UNIT = {"bytes": 1, "B": 1, "KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30, "TiB": 1 << 40}


def requested_from_message(text: str) -> int | None:
    """The size PyTorch's OOM message says was requested (rounded as printed), or ``None``.

    Used only for the figure when no observer saw the OOM (e.g. ``backend:cudaMallocAsync``);
    an error is always classified by its type, never by its text.
    """
    match = _TRIED.search(text)
    return int(float(match.group(1)) * _UNIT[match.group(2)]) if match else None


def allocator_snapshot_now(device: int, *, requested_bytes: int, step: int | None = None) -> OomSnapshot | None:
    """The allocator's figures now (no live blocks), for an OOM no observer saw.

    ``memory_stats`` reads host-side counters; ``mem_get_info`` asks the driver (no stream
    sync). ``None`` when CUDA is not initialised.
    """
    import torch

    if not (torch.cuda.is_available() and torch.cuda.is_initialized()):
        return None
    stats = torch.cuda.memory_stats(device)
    free, total = torch.cuda.mem_get_info(device)
    return OomSnapshot(
        device=device, requested_bytes=requested_bytes,
        allocated_bytes=int(stats.get("allocated_bytes.all.current", 0) or 0),
        reserved_bytes=int(stats.get("reserved_bytes.all.current", 0) or 0),
        device_free_bytes=int(free), device_total_bytes=int(total),
        inactive_split_bytes=int(stats.get("inactive_split_bytes.all.current", 0) or 0),
        alloc_retries=int(stats.get("num_alloc_retries", 0) or 0), step=step,
    )


def figures_line(snap: OomSnapshot) -> str:
    """One line: requested, allocated, reserved and free at the error."""
    return (f"tried to allocate {human_bytes(snap.requested_bytes)} with {human_bytes(snap.allocated_bytes)} "
            f"allocated, {human_bytes(snap.reserved_bytes)} reserved and {human_bytes(snap.device_free_bytes)} "
            f"free of {human_bytes(snap.device_total_bytes)}")
