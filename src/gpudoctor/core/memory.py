"""Read the CUDA caching allocator's statistics into :class:`AllocatorStats` records.

Command-line equivalent: ``python -c "import torch; print(torch.cuda.memory_summary())"``.
These calls read host-side counters: they add no host-device synchronisation.
"""

from __future__ import annotations

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
