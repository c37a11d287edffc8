"""The one timing protocol every benchmark uses.

1. Warm-up runs first (cuBLAS heuristics, NCCL communicators, allocator, page faults, clocks).
2. Each timed run is bracketed by CUDA events on the current stream (GPU work), or by
   ``time.perf_counter`` around the call (host work). A host clock read right after a launch
   measures the launch, not the work (seed 001 §1.3) — hence events on the GPU.
3. All runs are queued first and read back after ONE synchronisation, so the host never stalls
   the GPU between runs.
4. The figure is the median throughput over the repeats; the spread is its p10 and p90.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass

from gpudoctor.records.base import record


@dataclass(frozen=True, kw_only=True)
class Protocol:
    """How many runs to make.

    Attributes:
        warmup: untimed runs before timing.
        repeats: timed runs; the median and p10/p90 come from these.
        inner: calls per timed run (amortises event overhead on very short ops).
    """

    warmup: int = 3
    repeats: int = 10
    inner: int = 1

    def __post_init__(self) -> None:
        if self.warmup < 0:
            raise ValueError(f"warmup={self.warmup} must be 0 or more")
        if self.repeats < 1:
            raise ValueError(f"repeats={self.repeats} must be at least 1; use 5 or more for a spread")
        if self.inner < 1:
            raise ValueError(f"inner={self.inner} must be at least 1")


@record
class Spread:
    """Median and the 10th/90th percentiles of a list of samples."""

    median: float
    p10: float
    p90: float
    count: int


def spread(samples: list[float]) -> Spread:
    """Median, p10 and p90 of ``samples`` (inclusive quantiles; one sample gives itself thrice)."""
    if not samples:
        raise ValueError("no samples to summarise; repeats must be at least 1")
    ordered = sorted(samples)
    if len(ordered) == 1:
        v = ordered[0]
        return Spread(median=v, p10=v, p90=v, count=1)
    deciles = statistics.quantiles(ordered, n=10, method="inclusive")
    return Spread(median=statistics.median(ordered), p10=deciles[0], p90=deciles[-1], count=len(ordered))


def throughput(work: float, times_ms: list[float], *, scale: float = 1.0) -> Spread:
    """Spread of ``work / time`` per run, in units of ``work`` per second divided by ``scale``.

    The median is taken over per-run throughputs, so p10 is the slow end and p90 the fast end.
    """
    rates = [work / (ms / 1000.0) / scale for ms in times_ms if ms > 0]
    if not rates:
        raise ValueError("every run took 0 ms; the timer resolution is too coarse for this size")
    return spread(rates)


def time_gpu(
    fn: Callable[[], object], protocol: Protocol, *, during: Callable[[], object] | None = None
) -> list[float]:
    """Time ``fn`` on the current CUDA stream with events; milliseconds per call.

    ``during`` (optional) is called on the host after every timed run is queued and before the
    final sync, i.e. while the GPU is still busy with them (to read clocks under load).

    Host-device sync points: one ``torch.cuda.synchronize()`` after the warm-up (so the timed
    runs start on an idle GPU) and one after all timed runs (to read the events).
    """
    import torch

    for _ in range(protocol.warmup):
        fn()
    torch.cuda.synchronize()  # sync point: warm-up finished before timing starts
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(protocol.repeats)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(protocol.repeats)]
    for start, end in zip(starts, ends):
        start.record()
        for _ in range(protocol.inner):
            fn()
        end.record()
    if during is not None:
        during()
    torch.cuda.synchronize()  # sync point: read every event at once
    return [s.elapsed_time(e) / protocol.inner for s, e in zip(starts, ends)]


def time_host(fn: Callable[[], object], protocol: Protocol) -> list[float]:
    """Time ``fn`` on the host with ``time.perf_counter``; milliseconds per call (CPU work only)."""
    for _ in range(protocol.warmup):
        fn()
    times = []
    for _ in range(protocol.repeats):
        start = time.perf_counter()
        for _ in range(protocol.inner):
            fn()
        times.append((time.perf_counter() - start) * 1000.0 / protocol.inner)
    return times


def median_ms(times_ms: list[float]) -> float:
    """Median time of one run, in milliseconds."""
    return statistics.median(times_ms)
