"""Allocator statistics as plain data (from ``torch.cuda.memory_stats``)."""

from __future__ import annotations

from gpudoctor.records.base import record


@record
class AllocatorStats:
    """The caching allocator's counters for one device at one moment.

    ``reserved - allocated`` is memory the allocator holds but no tensor uses; a large gap with
    ``alloc_retries > 0`` is the fragmentation signature (``expandable_segments:True`` helps).
    """

    allocated_bytes: int
    reserved_bytes: int
    peak_allocated_bytes: int
    peak_reserved_bytes: int
    inactive_split_bytes: int = 0
    alloc_retries: int = 0
    ooms: int = 0
    active_bytes: int = 0
