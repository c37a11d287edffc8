"""The CUDA caching allocator: its statistics as :class:`AllocatorStats` records, and handing
its cached memory back (:func:`release_cached_memory`).

Command-line equivalent: ``python -c "import torch; print(torch.cuda.memory_summary())"``.
The statistics are host-side counters: reading them adds no host-device synchronisation.
"""

from __future__ import annotations

import gc
from typing import TYPE_CHECKING, Any

from gpudoctor.records.memory import AllocatorStats

if TYPE_CHECKING:  # pragma: no cover
    import torch


def stats_from_mapping(stats: dict[str, Any]) -> AllocatorStats:
    """Build :class:`AllocatorStats` from a ``torch.cuda.memory_stats()`` mapping."""

    def get(key: str) -> int:
        return int(stats.get(key, 0) or 0)

    return AllocatorStats(
        allocated_bytes=get("allocated_bytes.all.current"),
        reserved_bytes=get("reserved_bytes.all.current"),
        peak_allocated_bytes=get("allocated_bytes.all.peak"),
        peak_reserved_bytes=get("reserved_bytes.all.peak"),
        inactive_split_bytes=get("inactive_split_bytes.all.current"),
        alloc_retries=get("num_alloc_retries"),
        ooms=get("num_ooms"),
        active_bytes=get("active_bytes.all.current"),
    )


def allocator_stats(device: torch.device | int | None = None) -> AllocatorStats | None:
    """Current allocator statistics for ``device``; ``None`` when CUDA is not in use."""
    import torch

    if not torch.cuda.is_available() or not torch.cuda.is_initialized():
        return None
    return stats_from_mapping(torch.cuda.memory_stats(device))


def release_cached_memory() -> None:
    """Free the GPU memory nothing uses any more: collect unreachable Python objects (the frames
    of a failed step's traceback hold its activations until collected), then return the caching
    allocator's unused blocks to the driver (``torch.cuda.empty_cache()``).

    For between trials, runs and measurements, and after an out-of-memory error; never in the
    step loop, where it only makes the next steps allocate again. Does not initialise CUDA: with
    CUDA unused it only collects.
    """
    import torch

    gc.collect()
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        torch.cuda.empty_cache()
