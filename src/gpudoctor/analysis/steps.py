"""Step statistics of one rank: warm-up dropped, medians, shares of step time, leak slope.

Medians, not means: one step that waits on a checkpoint or a worker restart must not make a whole
run look data-loader bound. Shares are taken from medians of the same steps, so they are
comparable with each other (a share is "of the typical step").
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from gpudoctor.analysis.thresholds import Thresholds
from gpudoctor.records.step import StepRecord


def median(values: Sequence[float]) -> float | None:
    """Median of ``values``; ``None`` for an empty sequence."""
    data = sorted(values)
    n = len(data)
    if n == 0:
        return None
    mid = n // 2
    return float(data[mid]) if n % 2 else (data[mid - 1] + data[mid]) / 2.0


@dataclass(frozen=True, slots=True)
class LineFit:
    """Least-squares line ``y = slope * x + intercept`` with its coefficient of determination."""

    slope: float
    intercept: float
    r2: float


def least_squares(xs: Sequence[float], ys: Sequence[float]) -> LineFit | None:
    """Fit a line by ordinary least squares; ``None`` with fewer than 3 points or constant ``xs``.

    ``r2`` is 1.0 when ``ys`` is constant (a flat line explains it fully).
    """
    n = len(xs)
    if n < 3 or n != len(ys):
        return None
    mx = sum(xs) / n
    my = sum(ys) / n
    sxx = sum((x - mx) ** 2 for x in xs)
    if sxx == 0:
        return None
    sxy = sum((x - mx) * (y - my) for x, y in zip(xs, ys))
    slope = sxy / sxx
    intercept = my - slope * mx
    syy = sum((y - my) ** 2 for y in ys)
    if syy == 0:
        return LineFit(slope=slope, intercept=intercept, r2=1.0)
    ss_res = sum((y - (slope * x + intercept)) ** 2 for x, y in zip(xs, ys))
    return LineFit(slope=slope, intercept=intercept, r2=max(0.0, 1.0 - ss_res / syy))


def steady_steps(steps: Sequence[StepRecord], thresholds: Thresholds,
                 exclude: tuple[int, int] | None = None) -> list[StepRecord]:
    """The steps after warm-up: drop ``warmup_steps`` or ``warmup_frac`` of them, whichever is more,
    and the steps ``exclude`` (first, last inclusive: the profiler window, which slows them).

    Keeps at least ``min_steps`` (the last ones, outside the window when there are enough of
    those) when the run is short, so a 6-step run still says something, and all steps when there
    are fewer than that.
    """
    ordered = sorted(steps, key=lambda s: s.step)
    drop = max(thresholds.warmup_steps, math.ceil(thresholds.warmup_frac * len(ordered)))
    def unprofiled(part: list[StepRecord]) -> list[StepRecord]:
        return part if exclude is None else [s for s in part if not exclude[0] <= s.step <= exclude[1]]

    kept = unprofiled(ordered[drop:])
    if len(kept) < thresholds.min_steps:
        outside = unprofiled(ordered)
        kept = (outside if len(outside) >= thresholds.min_steps else ordered)[-thresholds.min_steps:]
    return kept


@dataclass(frozen=True, slots=True)
class RankStepStats:
    """Medians of one rank's steady steps and what they imply.

    Attributes:
        rank: the rank.
        n_total: steps recorded; ``n_used``: steps after warm-up.
        mean_step_ms: the mean step (ranks that synchronise every step have equal means even
            when their medians differ by noise).
        step_ms, data_wait_ms, h2d_ms, gpu_ms: medians (``h2d_ms``/``gpu_ms`` ``None`` when the
            probe could not measure them).
        data_wait_share, h2d_share, gpu_share: those medians over ``step_ms``.
        host_syncs, h2d_copies, h2d_bytes, h2d_pageable_bytes, h2d_blocking_copies: medians per
            step.
        samples: median batch size; ``samples_per_s``: ``samples / step_ms``.
        leak: least-squares fit of allocated bytes against the step index (``None`` without
            allocator statistics); ``alloc_first_bytes``/``alloc_last_bytes`` bracket it.
        peak_allocated_bytes, peak_reserved_bytes: the largest peaks seen in the steady steps.
        alloc_retries: allocator retries added during the steady steps; ``ooms``: OOMs seen.
        nonfinite_steps: steps (all, warm-up included) whose loss was NaN or inf.
        scaler_scales, scaler_skips: GradScaler scale per steady step, and how many were skipped.
    """

    rank: int
    n_total: int
    n_used: int
    step_ms: float
    mean_step_ms: float
    data_wait_ms: float
    h2d_ms: float | None
    gpu_ms: float | None
    host_syncs: float
    h2d_copies: float
    h2d_bytes: float
    h2d_pageable_bytes: float
    h2d_blocking_copies: float
    samples: float | None
    leak: LineFit | None
    alloc_first_bytes: int | None
    alloc_last_bytes: int | None
    peak_allocated_bytes: int | None
    peak_reserved_bytes: int | None
    alloc_retries: int
    ooms: int
    nonfinite_steps: tuple[int, ...]
    scaler_scales: tuple[float, ...]
    scaler_skips: int

    def share(self, ms: float | None) -> float:
        """``ms`` as a share of the median step (0.0 when unknown)."""
        if ms is None or self.step_ms <= 0:
            return 0.0
        return max(0.0, ms / self.step_ms)

    @property
    def data_wait_share(self) -> float:
        return self.share(self.data_wait_ms)

    @property
    def h2d_share(self) -> float:
        return self.share(self.h2d_ms)

    @property
    def gpu_share(self) -> float | None:
        return None if self.gpu_ms is None else min(1.0, self.share(self.gpu_ms))

    @property
    def samples_per_s(self) -> float | None:
        if self.samples is None or self.step_ms <= 0:
            return None
        return self.samples / (self.step_ms / 1000.0)


def _nonfinite(step: StepRecord) -> bool:
    if step.loss_finite is False:
        return True
    return step.loss is not None and not math.isfinite(step.loss)


def _median_opt(values: list[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    # a probe that measured only some steps: trust it when it covered at least half of them
    return median(known) if known and len(known) * 2 >= len(values) else None


def rank_step_stats(steps: Sequence[StepRecord], thresholds: Thresholds,
                    exclude: tuple[int, int] | None = None) -> RankStepStats | None:
    """Statistics of one rank's steps (``exclude``: the profiler window's steps); ``None`` when
    the rank recorded no step."""
    if not steps:
        return None
    used = steady_steps(steps, thresholds, exclude)
    mems = [(s.step, s.mem) for s in used if s.mem is not None]
    leak = least_squares([float(i) for i, _ in mems], [float(m.allocated_bytes) for _, m in mems])
    all_mems = [s.mem for s in sorted(steps, key=lambda s: s.step) if s.mem is not None]
    retries = 0
    if mems:
        # retries are cumulative counters: count what the steady steps added (warm-up growth
        # of the cache may retry once or twice by design)
        before = [s.mem for s in steps if s.mem is not None and s.step < used[0].step]
        base = before[-1].alloc_retries if before else mems[0][1].alloc_retries
        retries = max(0, mems[-1][1].alloc_retries - base)
    scales = tuple(s.scaler_scale for s in used if s.scaler_scale is not None)
    return RankStepStats(
        rank=used[0].rank,
        n_total=len(steps),
        n_used=len(used),
        step_ms=median([s.step_ms for s in used]) or 0.0,
        mean_step_ms=sum(s.step_ms for s in used) / len(used),
        data_wait_ms=median([s.data_wait_ms for s in used]) or 0.0,
        h2d_ms=_median_opt([s.h2d_ms for s in used]),
        gpu_ms=_median_opt([s.gpu_ms for s in used]),
        host_syncs=median([float(s.host_syncs) for s in used]) or 0.0,
        h2d_copies=median([float(s.h2d_copies) for s in used]) or 0.0,
        h2d_bytes=median([float(s.h2d_bytes) for s in used]) or 0.0,
        h2d_pageable_bytes=median([float(s.h2d_pageable_bytes) for s in used]) or 0.0,
        h2d_blocking_copies=median([float(s.h2d_blocking_copies) for s in used]) or 0.0,
        samples=_median_opt([None if s.samples is None else float(s.samples) for s in used]),
        leak=leak,
        alloc_first_bytes=mems[0][1].allocated_bytes if mems else None,
        alloc_last_bytes=mems[-1][1].allocated_bytes if mems else None,
        peak_allocated_bytes=max((m.peak_allocated_bytes for _, m in mems), default=None),
        peak_reserved_bytes=max((m.peak_reserved_bytes for _, m in mems), default=None),
        alloc_retries=retries,
        ooms=max((m.ooms for m in all_mems), default=0),
        nonfinite_steps=tuple(s.step for s in sorted(steps, key=lambda s: s.step) if _nonfinite(s)),
        scaler_scales=scales,
        scaler_skips=sum(1 for s in used if s.scaler_skipped),
    )


__all__ = ["LineFit", "RankStepStats", "least_squares", "median", "rank_step_stats", "steady_steps"]
