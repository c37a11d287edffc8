"""GPU utilisation and memory summaries from NVML samples (``GpuSample``), one per GPU index, and
the memory trend of the watched process tree from the host samples (``HostSample``).

NVML's ``utilization.gpu`` is the share of time *any* kernel ran in the last sample period, not
how busy the SMs were: 100% with one tiny kernel at a time is possible. It is therefore shown as
context and used only where the profiler window is missing, never as proof of saturation.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from gpudoctor.analysis.steps import LineFit, least_squares, median
from gpudoctor.records.gpu import GpuSample, HostSample

IDLE_UTIL_PCT = 10.0  # below this NVML utilisation a sample counts as "GPU idle"


@dataclass(frozen=True, slots=True)
class GpuUtilSummary:
    """One GPU over the run.

    Attributes:
        index: NVML index; ``name``: the GPU's name.
        samples: readings summarised.
        util_mean_pct, util_median_pct: NVML GPU utilisation (``None`` when the GPU gave none).
        idle_frac: share of readings under ``IDLE_UTIL_PCT``.
        mem_used_peak_bytes, mem_total_bytes: device memory (all processes) at its peak.
        power_mean_w, power_limit_w: average draw and the limit.
        throttle_reasons: every throttle reason seen, in first-seen order.
        pids: processes seen holding memory on it.
    """

    index: int
    name: str
    samples: int
    util_mean_pct: float | None
    util_median_pct: float | None
    idle_frac: float | None
    mem_used_peak_bytes: int | None
    mem_total_bytes: int | None
    power_mean_w: float | None
    power_limit_w: float | None
    throttle_reasons: tuple[str, ...]
    pids: tuple[int, ...]

    @property
    def mem_peak_frac(self) -> float | None:
        if not self.mem_used_peak_bytes or not self.mem_total_bytes:
            return None
        return self.mem_used_peak_bytes / self.mem_total_bytes


def summarize_gpus(samples: Sequence[GpuSample]) -> list[GpuUtilSummary]:
    """Summarise samples per GPU index, in index order."""
    by_index: dict[int, list[GpuSample]] = {}
    for sample in samples:
        by_index.setdefault(sample.index, []).append(sample)
    out = []
    for index in sorted(by_index):
        group = by_index[index]
        utils = [s.util_gpu_pct for s in group if s.util_gpu_pct is not None]
        mems = [s.mem_used_bytes for s in group if s.mem_used_bytes is not None]
        totals = [s.mem_total_bytes for s in group if s.mem_total_bytes]
        powers = [s.power_w for s in group if s.power_w is not None]
        limits = [s.power_limit_w for s in group if s.power_limit_w]
        reasons: list[str] = []
        pids: list[int] = []
        for s in group:
            reasons.extend(r for r in s.throttle_reasons if r not in reasons)
            pids.extend(p.pid for p in s.processes if p.pid not in pids)
        out.append(GpuUtilSummary(
            index=index,
            name=group[0].name,
            samples=len(group),
            util_mean_pct=sum(utils) / len(utils) if utils else None,
            util_median_pct=median(utils),
            idle_frac=sum(1 for u in utils if u < IDLE_UTIL_PCT) / len(utils) if utils else None,
            mem_used_peak_bytes=max(mems) if mems else None,
            mem_total_bytes=max(totals) if totals else None,
            power_mean_w=sum(powers) / len(powers) if powers else None,
            power_limit_w=max(limits) if limits else None,
            throttle_reasons=tuple(reasons),
            pids=tuple(sorted(pids)),
        ))
    return out


@dataclass(frozen=True, slots=True)
class BytesTrend:
    """Memory (bytes) against time: a least-squares line. The run's process-tree RSS
    (:func:`host_memory_trend`) and, with a leak verdict on top, the soak's and the monitor's
    memory trends (:class:`gpudoctor.analysis.soak.MemoryTrend`).

    Attributes:
        fit: bytes against seconds since the first reading.
        first_bytes, last_bytes: the first and last readings; ``span_s``: seconds between them.
    """

    fit: LineFit
    first_bytes: int
    last_bytes: int
    span_s: float

    @property
    def bytes_per_min(self) -> float:
        return self.fit.slope * 60.0

    @property
    def growth_bytes(self) -> float:
        """Growth along the fitted line over the span (less noisy than last minus first)."""
        return self.fit.slope * self.span_s


def bytes_trend(points: Sequence[tuple[float, float]]) -> BytesTrend | None:
    """Fit ``(seconds, bytes)`` points, in any order; ``None`` under 3 points or all at one time."""
    pts = sorted(points)
    if len(pts) < 3:
        return None
    t0 = pts[0][0]
    fit = least_squares([t - t0 for t, _ in pts], [float(b) for _, b in pts])
    if fit is None:
        return None
    return BytesTrend(fit=fit, first_bytes=int(pts[0][1]), last_bytes=int(pts[-1][1]), span_s=pts[-1][0] - t0)


def host_memory_trend(samples: Sequence[HostSample], start_s: float, end_s: float) -> BytesTrend | None:
    """Resident memory of the watched process tree (the script, its DataLoader workers, torchrun's
    ranks) between ``start_s`` and ``end_s`` (the steady steps: start-up, which loads CUDA and the
    data, and the exit are not growth); ``None`` under 3 readings that know it."""
    return bytes_trend([(s.timestamp_s, float(s.tree_rss_bytes)) for s in samples
                        if s.tree_rss_bytes and start_s <= s.timestamp_s <= end_s])


__all__ = ["IDLE_UTIL_PCT", "BytesTrend", "GpuUtilSummary", "bytes_trend", "host_memory_trend", "summarize_gpus"]
