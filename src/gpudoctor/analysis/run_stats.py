"""Steady-state step statistics of a run, per rank: what the terminal summary, the ``--try``
before/after table and ``--json`` quote. Pure: records in, numbers out.

Steps are chosen exactly as the rules choose them (:func:`gpudoctor.analysis.steps.steady_steps`:
warm-up and the profiler window left out), so every view quotes the same steps.
"""

from __future__ import annotations

from dataclasses import dataclass

from gpudoctor.analysis.steps import median as _median
from gpudoctor.analysis.steps import steady_steps as _steady
from gpudoctor.analysis.thresholds import Thresholds
from gpudoctor.records.rundir import RunData
from gpudoctor.records.step import StepRecord


@dataclass(frozen=True, kw_only=True)
class StepStats:
    """Steady-state figures of one rank (medians are per step)."""

    rank: int
    steps: int  # steps the figures are based on
    step_ms: float | None
    throughput: float | None  # samples/s when the batch size is known, else steps/s
    unit: str  # "samples/s" or "steps/s"
    data_wait_ms: float | None
    gpu_ms: float | None
    h2d_ms: float | None
    h2d_mb: float | None
    pageable_frac: float | None
    host_syncs: float | None
    peak_mem_gb: float | None


def steady_steps(steps: list[StepRecord], window: tuple[int, ...] = ()) -> list[StepRecord]:
    """The steady steps, chosen exactly as the analysis chooses them (warm-up and the profiler
    window dropped), so the summary, the --try table and the findings quote the same steps."""
    return _steady(steps, Thresholds(), (window[0], window[-1]) if window else None)


def step_stats(rank: int, steps: list[StepRecord], window: tuple[int, ...] = ()) -> StepStats:
    """Median per-step figures of ``steps`` in steady state."""
    kept = steady_steps(steps, window)
    total_ms = sum(s.step_ms for s in kept)
    samples = [s.samples for s in kept]
    if kept and all(n is not None for n in samples) and total_ms > 0:
        throughput, unit = sum(samples) / total_ms * 1000.0, "samples/s"  # type: ignore[arg-type]
    else:
        throughput, unit = (len(kept) / total_ms * 1000.0 if total_ms > 0 else None), "steps/s"
    h2d_bytes = sum(s.h2d_bytes for s in kept)
    peaks = [s.mem.peak_allocated_bytes for s in kept if s.mem is not None]
    return StepStats(
        rank=rank,
        steps=len(kept),
        step_ms=_median([s.step_ms for s in kept]),
        throughput=throughput,
        unit=unit,
        data_wait_ms=_median([s.data_wait_ms for s in kept]),
        gpu_ms=_median([s.gpu_ms for s in kept if s.gpu_ms is not None]),
        h2d_ms=_median([s.h2d_ms for s in kept if s.h2d_ms is not None]),
        h2d_mb=h2d_bytes / len(kept) / 1e6 if kept else None,
        pageable_frac=sum(s.h2d_pageable_bytes for s in kept) / h2d_bytes if h2d_bytes else None,
        host_syncs=_median([float(s.host_syncs) for s in kept]),
        peak_mem_gb=max(peaks) / 1e9 if peaks else None,
    )


def run_stats(run: RunData) -> list[StepStats]:
    """:func:`step_stats` for every rank that recorded steps."""
    window = tuple(run.manifest.profile_window)
    return [step_stats(rank, steps, window) for rank, steps in sorted(run.steps.items()) if steps]
