"""What the live ``gpudoctor monitor`` view infers from the newest samples: the ``nvidia-smi dmon``
readings of seed 000 §3.3 as hints, and rates of the cumulative counters. Pure: records in, plain
values out; the view words them (``report/monitor_view.py``).

Hints, in the order the seed lists them:

* ``copies``: utilisation under 70 % while PCIe rx is heavy -> the GPU waits on host-to-device
  copies (pin_memory, non_blocking, or keep the data on the GPU).
* ``input``: utilisation under 70 % while a host core is saturated -> the input pipeline.
* ``compute``: utilisation over 80 % with little PCIe traffic -> compute bound: speed the model
  up, not the data pipeline (:func:`gpudoctor.analysis.soak.compute_bound`).
* ``memory_rising``: memory used climbing steadily over minutes and still climbing -> leak-like
  (seed: "fbs keeps growing -> a memory leak"), judged by
  :func:`gpudoctor.analysis.soak.memory_trend` over the monitor's memory trail.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from gpudoctor.analysis.soak import Limit, MemoryTrend, compute_bound, memory_trend
from gpudoctor.records.gpu import GpuSample, HostSample

LIVE_LIMITS: dict[str, Limit] = {
    "low_util_pct": Limit(
        70.0, "seed 000 §3.3: utilization.gpu under 70 % with heavy rx/tx -> data movement bound"),
    "high_rx_bytes_per_s": Limit(
        4e9, "4 GB/s of host-to-device traffic is a batch of images or more every step; a GPU "
        "that idles meanwhile is waiting for it"),
    "saturated_core_pct": Limit(
        95.0, "one host core at 95 % or more is a single-threaded loader (num_workers=0) or the "
        "main process doing the augmentation"),
}


@dataclass(frozen=True, slots=True)
class Hint:
    """One live hint: ``kind`` (``copies``, ``input``, ``compute``, ``memory_rising``), the GPU,
    and the figures behind it (``value`` is PCIe rx B/s, the busiest core %, PCIe rx+tx B/s;
    ``trend`` for ``memory_rising``)."""

    kind: str
    gpu: int
    util_pct: float | None = None
    value: float | None = None
    trend: MemoryTrend | None = None


def live_hints(latest: Sequence[GpuSample], host: HostSample | None = None,
               memory_trails: Mapping[int, Sequence[tuple[float, float]]] | None = None) -> list[Hint]:
    """Hints for the newest sample of each GPU; ``memory_trails``: GPU index -> (time s, memory
    used bytes) points over the last minutes (the monitor keeps one, thinned)."""
    lim = LIVE_LIMITS
    out = []
    for s in latest:
        low = s.util_gpu_pct is not None and s.util_gpu_pct < lim["low_util_pct"].value
        if low and (s.pcie_rx_bytes_per_s or 0) >= lim["high_rx_bytes_per_s"].value:
            out.append(Hint("copies", s.index, s.util_gpu_pct, s.pcie_rx_bytes_per_s))
        elif low and host is not None and \
                (host.busiest_core_pct or 0) >= lim["saturated_core_pct"].value:
            out.append(Hint("input", s.index, s.util_gpu_pct, host.busiest_core_pct))
        elif compute_bound(s):
            out.append(Hint("compute", s.index, s.util_gpu_pct,
                            s.pcie_rx_bytes_per_s + s.pcie_tx_bytes_per_s))
        trail = (memory_trails or {}).get(s.index)
        trend = memory_trend(trail) if trail else None
        if trend is not None and trend.leak_like:
            out.append(Hint("memory_rising", s.index, trend=trend))
    return out


def counter_rate(history: Sequence[GpuSample], field: str) -> float | None:
    """Per-second rate of a cumulative counter (``nvlink_rx_bytes``…) over the last two readings.

    The sampler reads counters once a second and repeats the reading in the samples between, so
    a reading is dated by the first sample that carries it. ``0.0`` when the counter held still
    over the history; ``None`` under two readings or when it went backwards (a driver reload).
    An idle counter that starts moving is averaged over the idle stretch once, then is exact.
    """
    runs: list[tuple[float, float]] = []  # (first time seen, value)
    for s in history:
        v = getattr(s, field)
        if v is not None and (not runs or runs[-1][1] != v):
            runs.append((s.timestamp_s, v))
    if len(runs) >= 2:
        (t0, v0), (t1, v1) = runs[-2], runs[-1]
        return (v1 - v0) / (t1 - t0) if v1 >= v0 and t1 > t0 else None
    known = [s.timestamp_s for s in history if getattr(s, field) is not None]
    return 0.0 if len(known) >= 2 and known[-1] > known[0] else None


__all__ = ["LIVE_LIMITS", "Hint", "counter_rate", "live_hints"]
