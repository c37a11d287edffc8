"""Step statistics of one rank: warm-up dropped, medians, shares of step time, leak slope, tail.

The one place that computes a rank's step figures: the findings, the terminal table, ``--json``,
the ``--try`` comparison and the HTML report all quote :class:`RankStepStats`.

Medians for the shares: one step that waits on a checkpoint or a worker restart must not make a
whole run look data-loader bound. Shares are taken from medians of the same steps, so they are
comparable with each other (a share is "of the typical step"). Throughput is the mean (samples
over the steady steps' total time): it is what the run delivers, slow steps included, and
periodic stalls that the median hides show up in it and in :class:`Tail`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace

from gpudoctor.analysis.host_work import HostWork, host_work
from gpudoctor.analysis.linefit import LineFit, least_squares, median
from gpudoctor.analysis.one_off import OneOff, find_one_off
from gpudoctor.analysis.step_tail import Tail, step_tail
from gpudoctor.analysis.step_trend import StepTrend, step_trend
from gpudoctor.analysis.thresholds import Thresholds
from gpudoctor.records.step import StepRecord


def steady_steps(steps: Sequence[StepRecord], thresholds: Thresholds,
                 exclude: tuple[int, int] | None = None,
                 history: tuple[int, int] | None = None) -> list[StepRecord]:
    """The steps after warm-up: drop ``warmup_steps`` or ``warmup_frac`` of them, whichever is more,
    the steps ``exclude`` (first, last inclusive: the profiler window, which slows them) and the
    steps ``history`` (first, last inclusive: the ones ``run`` recorded allocation history in to
    name a leak's sites, ``LeakSites.history_steps``: every allocation recorded a stack).

    Keeps at least ``min_steps`` (the last ones, outside both when there are enough of those)
    when the run is short, so a 6-step run still says something, and all steps when there are
    fewer than that. Then drops a one-off slow step (:mod:`gpudoctor.analysis.one_off`), which
    :attr:`RankStepStats.one_off` reports.
    """
    return _steady(steps, thresholds, exclude, history)[0]


def _inside(step: int, span: tuple[int, int] | None) -> bool:
    return span is not None and span[0] <= step <= span[1]


def _steady(steps: Sequence[StepRecord], thresholds: Thresholds, exclude: tuple[int, int] | None,
            history: tuple[int, int] | None = None) -> tuple[list[StepRecord], OneOff | None, tuple[int, ...]]:
    """(the steady steps, their one-off, the ``history`` steps left out of them: those past the
    first kept step; a range inside warm-up was left out anyway)."""
    ordered = sorted(steps, key=lambda s: s.step)
    drop = max(thresholds.warmup_steps, math.ceil(thresholds.warmup_frac * len(ordered)))
    def unslowed(part: list[StepRecord]) -> list[StepRecord]:
        return [s for s in part if not _inside(s.step, exclude) and not _inside(s.step, history)]

    past = ordered[drop:]
    kept = unslowed(past)
    if len(kept) < thresholds.min_steps:
        outside = unslowed(ordered)
        kept = (outside if len(outside) >= thresholds.min_steps else ordered)[-thresholds.min_steps:]
        past = [s for s in ordered if kept and s.step >= kept[0].step]
    held = {s.step for s in kept}
    left = tuple(s.step for s in past if s.step not in held and _inside(s.step, history))
    used, one_off = steady_and_one_off(kept, thresholds)
    return used, one_off, left


def steady_and_one_off(kept: list[StepRecord], thresholds: Thresholds) -> tuple[list[StepRecord], OneOff | None]:
    """``kept`` without its one-off slow step(s) (:func:`gpudoctor.analysis.one_off.find_one_off`:
    a late start-up cost such as cuDNN autotuning a new batch shape), and that one-off."""
    one = find_one_off(kept, thresholds)
    if one is None:
        return kept, None
    return [s for s in kept if s.step not in one.steps], one


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
        total_ms: the steady steps' time, summed; ``total_samples``: their samples (``None``
            when a step's batch size is unknown). ``throughput`` is their ratio.
        mean_data_wait_ms, mean_h2d_ms: the means of the data wait and of the copy issue time
            (the breakdown of the mean step uses them).
        mean_sync_ms: the mean host time blocked in synchronising calls (``None`` in older
            recordings).
        recompile_steps, recompiles, recompile_ms: steady steps in which ``torch.compile``
            compiled frames, how many frames, and those steps' time beyond the median step.
        tail: the slow steps the median hides.
        trend: step time against the step index (a run that slows down over time).
        grad_norms: ``(step, norm)`` of the steady steps whose global gradient norm was recorded
            (the script's ``clip_grad_norm_``), steps the GradScaler skipped left out.
        nonfinite_grad_steps: steps (all, warm-up included) whose recorded norm was NaN or inf,
            steps the GradScaler skipped left out (an inf there is what it is for).
        one_off: the one-off slow step(s) left out of every figure above (``n_used`` does
            not count them), ``None`` when there was none.
        history_steps: the steps past warm-up left out because ``run`` recorded allocation
            history in them to name a leak's sites (slower: every allocation records a stack);
            ``n_used`` does not count them, and they are no stall, one-off or slow-down.
        host_work: the named host operations (serialization, garbage collection) and the
            sampled frames of the steady steps (:mod:`gpudoctor.analysis.host_work`).
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
    total_ms: float = 0.0
    total_samples: int | None = None
    mean_data_wait_ms: float = 0.0
    mean_h2d_ms: float | None = None
    mean_sync_ms: float | None = None
    tail: Tail | None = None
    recompile_steps: tuple[int, ...] = ()
    recompiles: int = 0
    recompile_ms: float = 0.0
    trend: StepTrend | None = None
    grad_norms: tuple[tuple[int, float], ...] = ()
    nonfinite_grad_steps: tuple[int, ...] = ()
    one_off: OneOff | None = None
    h2d_wide_float_bytes: float = 0.0  # median, as h2d_bytes
    empty_cache_calls: float = 0.0  # median torch.cuda.empty_cache() calls per step
    history_steps: tuple[int, ...] = ()
    host_work: HostWork = HostWork()

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
        """Samples per second over the steady steps (a mean: slow steps count)."""
        if self.total_samples is None or self.total_ms <= 0:
            return None
        return self.total_samples / (self.total_ms / 1000.0)

    @property
    def steps_per_s(self) -> float | None:
        return self.n_used / (self.total_ms / 1000.0) if self.total_ms > 0 else None

    @property
    def throughput(self) -> tuple[float | None, str]:
        """(samples/s, "samples/s") when every steady step knows its batch size, else steps/s."""
        if self.samples_per_s is not None:
            return self.samples_per_s, "samples/s"
        return self.steps_per_s, "steps/s"


def _nonfinite(step: StepRecord) -> bool:
    if step.loss_finite is False:
        return True
    return step.loss is not None and not math.isfinite(step.loss)


def _median_opt(values: list[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    # a probe that measured only some steps: trust it when it covered at least half of them
    return median(known) if known and len(known) * 2 >= len(values) else None


def _mean_opt(values: list[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return sum(known) / len(known) if known and len(known) * 2 >= len(values) else None


def rank_step_stats(steps: Sequence[StepRecord], thresholds: Thresholds,
                    exclude: tuple[int, int] | None = None,
                    history: tuple[int, int] | None = None) -> RankStepStats | None:
    """Statistics of one rank's steps (``exclude``: the profiler window's steps; ``history``: the
    steps recorded with allocation history on, see :func:`steady_steps`); ``None`` when the rank
    recorded no step."""
    if not steps:
        return None
    used, one_off, history_steps = _steady(steps, thresholds, exclude, history)
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
    step_ms = median([s.step_ms for s in used]) or 0.0
    wait_ms = median([s.data_wait_ms for s in used]) or 0.0
    syncs = median([float(s.host_syncs) for s in used]) or 0.0
    samples = [s.samples for s in used]
    return RankStepStats(
        rank=used[0].rank,
        n_total=len(steps),
        n_used=len(used),
        step_ms=step_ms,
        mean_step_ms=sum(s.step_ms for s in used) / len(used),
        data_wait_ms=wait_ms,
        h2d_ms=_median_opt([s.h2d_ms for s in used]),
        gpu_ms=_median_opt([s.gpu_ms for s in used]),
        host_syncs=syncs,
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
        total_ms=sum(s.step_ms for s in used),
        total_samples=sum(samples) if all(n is not None for n in samples) else None,  # type: ignore[arg-type]
        mean_data_wait_ms=sum(s.data_wait_ms for s in used) / len(used),
        mean_h2d_ms=_mean_opt([s.h2d_ms for s in used]),
        mean_sync_ms=_mean_opt([s.sync_ms for s in used]),
        h2d_wide_float_bytes=median([float(s.h2d_wide_float_bytes) for s in used]) or 0.0,
        empty_cache_calls=median([float(s.empty_cache_calls) for s in used]) or 0.0,
        tail=step_tail(used, step_ms, wait_ms, syncs, thresholds),
        recompile_steps=tuple(s.step for s in used if s.compiles),
        recompiles=sum(s.compiles or 0 for s in used),
        recompile_ms=sum(max(0.0, s.step_ms - step_ms) for s in used if s.compiles),
        trend=step_trend(used, thresholds),
        grad_norms=tuple((s.step, s.grad_norm) for s in used
                         if s.grad_norm is not None and not s.scaler_skipped),
        nonfinite_grad_steps=tuple(s.step for s in sorted(steps, key=lambda s: s.step)
                                   if s.grad_norm is not None and not s.scaler_skipped
                                   and not math.isfinite(s.grad_norm)),
        one_off=one_off,
        history_steps=history_steps,
        host_work=host_work(used, step_ms, thresholds),
    )


def stats_past_warmup(steps: Sequence[StepRecord], warmup: int) -> RankStepStats | None:
    """:func:`rank_step_stats` of a tuner trial, which sizes its own warm-up: exactly the first
    ``warmup`` steps dropped (no ``warmup_frac`` on top; the last step kept when no other is left).
    ``tune`` on a target and on a script both measure their trials with it, with the medians,
    means and throughput ``run`` quotes."""
    th = replace(Thresholds(), warmup_steps=warmup, warmup_frac=0.0, min_steps=1)
    return rank_step_stats(steps, th)


__all__ = ["LineFit", "OneOff", "RankStepStats", "StepTrend", "Tail", "least_squares", "median", "rank_step_stats",
           "stats_past_warmup", "steady_and_one_off", "steady_steps", "step_trend"]
