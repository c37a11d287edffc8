"""Series for plotting a run: GPU metrics over time, the per-step time breakdown, memory per step.

Pure: records in, plain numbers out. The report draws these; it computes nothing itself.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from gpudoctor.analysis.steps import LineFit, RankStepStats
from gpudoctor.records.gpu import GpuSample
from gpudoctor.records.step import StepRecord
from gpudoctor.records.units import GIB


@dataclass(frozen=True)
class GpuSeries:
    """One GPU's samples as parallel lists; ``None`` where the metric was unavailable."""

    index: int
    name: str
    t_s: list[float] = field(default_factory=list)  # seconds since the run's first sample
    util_pct: list[float | None] = field(default_factory=list)
    mem_used_gib: list[float | None] = field(default_factory=list)
    power_w: list[float | None] = field(default_factory=list)
    mem_total_gib: float | None = None
    power_limit_w: float | None = None


MAX_POINTS = 1200  # per line: beyond this a chart shows no more detail, only gets slower


def _bucket_mean(values: list[float | None], size: int) -> list[float | None]:
    out: list[float | None] = []
    for i in range(0, len(values), size):
        chunk = [v for v in values[i:i + size] if v is not None]
        out.append(sum(chunk) / len(chunk) if chunk else None)
    return out


def gpu_series(samples: list[GpuSample], *, max_points: int = MAX_POINTS) -> list[GpuSeries]:
    """Group samples by GPU index, in time order, with time relative to the first sample.

    A GPU with more than ``max_points`` samples is averaged over equal groups of consecutive
    samples (a 10-minute run at 10 Hz: 6,000 samples -> 1,200 points of 0.5 s each).
    """
    series = _gpu_series(samples)
    return [_downsample(s, max_points) for s in series]


def _downsample(s: GpuSeries, max_points: int) -> GpuSeries:
    if len(s.t_s) <= max_points:
        return s
    size = -(-len(s.t_s) // max_points)  # ceil
    return GpuSeries(
        index=s.index, name=s.name, t_s=[s.t_s[i] for i in range(0, len(s.t_s), size)],
        util_pct=_bucket_mean(s.util_pct, size), mem_used_gib=_bucket_mean(s.mem_used_gib, size),
        power_w=_bucket_mean(s.power_w, size), mem_total_gib=s.mem_total_gib,
        power_limit_w=s.power_limit_w,
    )


def _gpu_series(samples: list[GpuSample]) -> list[GpuSeries]:
    if not samples:
        return []
    t0 = min(s.timestamp_s for s in samples)
    by_index: dict[int, GpuSeries] = {}
    for s in sorted(samples, key=lambda s: (s.index, s.timestamp_s)):
        series = by_index.get(s.index)
        if series is None:
            series = GpuSeries(
                index=s.index,
                name=s.name,
                mem_total_gib=None if s.mem_total_bytes is None else s.mem_total_bytes / GIB,
                power_limit_w=s.power_limit_w,
            )
            by_index[s.index] = series
        series.t_s.append(round(s.timestamp_s - t0, 3))
        series.util_pct.append(s.util_gpu_pct)
        series.mem_used_gib.append(None if s.mem_used_bytes is None else s.mem_used_bytes / GIB)
        series.power_w.append(s.power_w)
    return [by_index[i] for i in sorted(by_index)]


@dataclass(frozen=True)
class StepBreakdown:
    """Where each step's host wall time went, in ms, one list entry per step.

    ``data_wait + h2d + compute + other == step`` for every step. ``compute`` is the GPU span
    between the step's boundaries measured with CUDA events when known (capped so the parts never
    exceed the step), else 0 — a span, idle gaps included, not the GPU's busy time (that comes
    from the profiler window: :mod:`gpudoctor.analysis.breakdown`); ``other`` is the rest.
    """

    rank: int
    group: int = 1  # steps averaged into each entry (1: every step drawn)
    step: list[int] = field(default_factory=list)
    data_wait_ms: list[float] = field(default_factory=list)
    h2d_ms: list[float] = field(default_factory=list)
    compute_ms: list[float] = field(default_factory=list)
    other_ms: list[float] = field(default_factory=list)
    step_ms: list[float] = field(default_factory=list)


def step_breakdown(rank: int, steps: list[StepRecord], *, max_points: int = MAX_POINTS) -> StepBreakdown:
    """Split each step's wall time into data wait, H2D issue time, GPU compute and the rest.

    More than ``max_points`` steps are averaged over equal groups of consecutive steps
    (``group`` says how many; ``step`` is each group's first step).
    """
    out = _step_breakdown(rank, steps)
    if len(out.step) <= max_points:
        return out
    size = -(-len(out.step) // max_points)
    return StepBreakdown(
        rank=rank, group=size, step=out.step[::size],
        **{name: [round(v, 3) for v in _bucket_mean(getattr(out, name), size)]  # type: ignore[misc]
           for name in ("data_wait_ms", "h2d_ms", "compute_ms", "other_ms", "step_ms")},
    )


def _step_breakdown(rank: int, steps: list[StepRecord]) -> StepBreakdown:
    out = StepBreakdown(rank=rank)
    for rec in sorted(steps, key=lambda r: r.step):
        total = max(rec.step_ms, 0.0)
        data = min(max(rec.data_wait_ms, 0.0), total)
        h2d = min(max(rec.h2d_ms or 0.0, 0.0), total - data)
        compute = min(max(rec.gpu_ms or 0.0, 0.0), total - data - h2d)
        out.step.append(rec.step)
        out.data_wait_ms.append(round(data, 3))
        out.h2d_ms.append(round(h2d, 3))
        out.compute_ms.append(round(compute, 3))
        out.other_ms.append(round(total - data - h2d - compute, 3))
        out.step_ms.append(round(total, 3))
    return out


@dataclass(frozen=True)
class MemorySeries:
    """Allocator memory per step (GiB) and the leak rule's trend of ``allocated`` (GiB per step)."""

    rank: int
    step: list[int] = field(default_factory=list)
    allocated_gib: list[float] = field(default_factory=list)
    reserved_gib: list[float] = field(default_factory=list)
    peak_gib: list[float] = field(default_factory=list)
    slope_gib_per_step: float | None = None
    intercept_gib: float | None = None


def memory_series(rank: int, steps: list[StepRecord], trend: LineFit | None = None) -> MemorySeries:
    """Allocated / reserved / peak per step, and ``trend`` in GiB.

    ``trend`` is the leak rule's own fit, :attr:`RankStepStats.leak` (allocated bytes against the
    step over the steady steps): the chart draws the line the rule judged, not a second fit.
    """
    out = MemorySeries(rank=rank)
    for rec in sorted(steps, key=lambda r: r.step):
        if rec.mem is None:
            continue
        out.step.append(rec.step)
        out.allocated_gib.append(rec.mem.allocated_bytes / GIB)
        out.reserved_gib.append(rec.mem.reserved_bytes / GIB)
        out.peak_gib.append(rec.mem.peak_allocated_bytes / GIB)
    if trend is None:
        return out
    return MemorySeries(
        rank=rank,
        step=out.step,
        allocated_gib=out.allocated_gib,
        reserved_gib=out.reserved_gib,
        peak_gib=out.peak_gib,
        slope_gib_per_step=trend.slope / GIB,
        intercept_gib=trend.intercept / GIB,
    )


def slowest_rank(stats: dict[int, RankStepStats]) -> int:
    """The rank with the largest steady median step (:attr:`RankStepStats.step_ms`; ties: the
    lowest rank)."""
    return max(sorted(stats), key=lambda r: stats[r].step_ms)
