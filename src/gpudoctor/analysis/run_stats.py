"""The steady-state figures of a run, per rank, as the terminal summary, the ``--try`` before/after
table and ``--json`` quote them. Pure: records in, numbers out.

Not a second computation: every figure is read from :class:`gpudoctor.analysis.steps.RankStepStats`
(via :func:`gpudoctor.analysis.facts.rank_stats`, which chooses the steps exactly as the rules
do: warm-up, the profiler window and the steps recorded with allocation history left out), so
every view quotes the same numbers.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from gpudoctor.analysis.compile_time import compile_line, compile_time
from gpudoctor.analysis.facts import main_loader, rank_stats
from gpudoctor.analysis.one_off import one_off_cause, one_off_line
from gpudoctor.analysis.steps import RankStepStats
from gpudoctor.analysis.thresholds import Thresholds
from gpudoctor.records.rundir import RunData


@dataclass(frozen=True, kw_only=True)
class StepStats:
    """Steady-state figures of one rank: ``throughput`` is a mean over the steady steps (samples
    or steps over their total time); the per-step figures are medians."""

    rank: int
    steps: int  # steps the figures are based on
    step_ms: float | None  # median
    mean_step_ms: float | None
    throughput: float | None  # samples/s when the batch size is known, else steps/s (mean)
    unit: str  # "samples/s" or "steps/s"
    data_wait_ms: float | None  # median
    gpu_ms: float | None  # median of the CUDA-event span per step
    h2d_ms: float | None  # median host time issuing copies
    h2d_mb: float | None  # median megabytes copied per step
    pageable_frac: float | None  # share of copied bytes from pageable memory
    host_syncs: float | None  # median
    peak_mem_gb: float | None  # largest allocator peak of the steady steps
    one_off_steps: tuple[int, ...] = ()  # one-off slow steps left out of every figure above
    one_off_ms: float | None = None  # their time, summed
    one_off: str | None = None  # the line every view prints for them (with the likely cause)
    history_steps: tuple[int, ...] = ()  # steps recorded with allocation history, left out
    history: str | None = None  # the line every view prints for them
    compile_s: float | None = None  # seconds compiling (torch.compile), whole run; None: not measured
    compile_steps: tuple[int, ...] = ()  # the steps that compiled, warm-up included
    compile: str | None = None  # the line every view prints for them


def one_off_note(stats: RankStepStats, config: Any = None) -> str | None:
    """``one-time: step 15, 1.2 s (...) - left out of the steady figures`` for the rank's one-off
    slow step(s), the likely cause from its ``config`` (``RankConfig``: ``cudnn.benchmark`` and
    the loader's ``drop_last``); ``None`` without one. Every view prints this line."""
    one = stats.one_off
    if one is None:
        return None
    loader = main_loader(config)
    cause = one_off_cause(one, getattr(config, "cudnn_benchmark", None),
                          None if loader is None else loader.drop_last)
    return f"rank {stats.rank}: " + one_off_line(one, cause)


def history_note(stats: RankStepStats) -> str | None:
    """``rank 0: 5 steps (9-13) ran with allocation history on ...`` for the steps ``run``
    recorded allocation history in to name a leak's sites, left out of the steady figures (and
    of ``n_used``); ``None`` without them. Every view prints this line."""
    steps = stats.history_steps
    if not steps:
        return None
    where = str(steps[0]) if len(steps) == 1 else f"{steps[0]}-{steps[-1]}"
    label = "step" if len(steps) == 1 else "steps"
    return (f"rank {stats.rank}: {len(steps)} {label} ({where}) ran with allocation history on, "
            "to name the leak's sites — left out of the steady figures")


def from_rank_stats(stats: RankStepStats, config: Any = None, steps: Any = ()) -> StepStats:
    """The view of one rank's :class:`RankStepStats` (``config``: its ``RankConfig``, for the
    one-off step's likely cause; ``steps``: all its step records, for the compile time)."""
    throughput, unit = stats.throughput
    compiled = compile_time(stats.rank, steps)
    h2d_bytes = stats.h2d_bytes
    return StepStats(
        rank=stats.rank,
        steps=stats.n_used,
        step_ms=stats.step_ms,
        mean_step_ms=stats.mean_step_ms,
        throughput=throughput,
        unit=unit,
        data_wait_ms=stats.data_wait_ms,
        gpu_ms=stats.gpu_ms,
        h2d_ms=stats.h2d_ms,
        h2d_mb=h2d_bytes / 1e6,
        pageable_frac=stats.h2d_pageable_bytes / h2d_bytes if h2d_bytes else None,
        host_syncs=stats.host_syncs,
        peak_mem_gb=None if stats.peak_allocated_bytes is None else stats.peak_allocated_bytes / 1e9,
        one_off_steps=() if stats.one_off is None else stats.one_off.steps,
        one_off_ms=None if stats.one_off is None else stats.one_off.total_ms,
        one_off=one_off_note(stats, config),
        history_steps=stats.history_steps,
        history=history_note(stats),
        compile_s=None if compiled is None or compiled.compile_ms is None else round(compiled.compile_ms / 1000, 2),
        compile_steps=() if compiled is None else compiled.steps,
        compile=None if compiled is None else compile_line(compiled),
    )


def run_stats(run: RunData, thresholds: Thresholds | None = None) -> list[StepStats]:
    """:class:`StepStats` for every rank that recorded steps."""
    th = thresholds or Thresholds()
    out = []
    for rank in sorted(run.steps):
        stats = rank_stats(run, rank, th)
        if stats is not None:
            out.append(from_rank_stats(stats, run.configs.get(rank), run.steps.get(rank, ())))
    return out


__all__ = ["StepStats", "from_rank_stats", "history_note", "one_off_note", "run_stats"]
