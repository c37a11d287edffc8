"""The terminal summary of a ``gpudoctor run``: how the run ended and what one step costs.

Figures skip the warm-up steps and the profiler window's steps (the profiler slows those), so
they describe the script's steady state.
"""

from __future__ import annotations

from dataclasses import dataclass

from gpudoctor.analysis.steps import median as _median
from gpudoctor.analysis.steps import steady_steps as _steady
from gpudoctor.analysis.thresholds import Thresholds
from gpudoctor.records.rundir import RunData
from gpudoctor.records.step import StepRecord

STATUS_WORDS = {
    "completed": "ran to its end",
    "stopped": "stopped after the diagnostic window (--steps)",
    "crashed": "crashed",
    "interrupted": "interrupted (Ctrl-C)",
    "no_steps": "exited without any optimizer step",
    "timeout": "stopped: no optimizer step before the first-step timeout",
    "running": "did not finish writing its manifest",
}


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


def _fmt(value: float | None, spec: str = ".1f", suffix: str = "") -> str:
    return "-" if value is None else f"{value:{spec}}{suffix}"


def render_summary(run: RunData, *, full: bool = True):
    """A rich renderable: the status, error lines and notes, and (``full``) a per-rank table.

    With ``full=False`` only what the findings view does not show: the status explained, the
    script's last error lines and the notes on missing evidence.
    """
    from rich.console import Group
    from rich.table import Table
    from rich.text import Text

    m = run.manifest
    lines = [Text(f"command: {' '.join(m.command)}")] if full else []
    if full or m.status not in ("stopped", "completed"):
        lines.append(Text(
            f"status: {m.status} — {STATUS_WORDS.get(m.status, m.status)}"
            + (f" (exit code {m.exit_code})" if m.exit_code not in (None, 0) else "")
        ))
    if m.knobs and full:
        lines.append(Text(f"knobs: {', '.join(m.knobs)}"))
    if m.error:
        lines.append(Text("error:\n" + "\n".join(m.error.splitlines()[-8:])))
    for note in m.notes:
        lines.append(Text(f"note: {note}"))
    stats = run_stats(run)
    if not full:
        return Group(*lines)
    if not stats:
        lines.append(Text("no optimizer steps were recorded"))
        return Group(*lines)
    table = Table(title="Per-step cost (steady state, medians per step)", title_justify="left")
    unit = stats[0].unit if len({s.unit for s in stats}) == 1 else "throughput"
    for name in ("rank", "steps", "step ms", unit, "wait ms", "GPU ms", "H2D MB",
                 "pageable", "syncs", "peak GB"):
        table.add_column(name, justify="right")
    for s in stats:
        table.add_row(
            str(s.rank),
            str(s.steps),
            _fmt(s.step_ms, ".2f"),
            _fmt(s.throughput, ".1f") + ("" if unit == s.unit else f" {s.unit}"),
            _fmt(s.data_wait_ms, ".2f"),
            _fmt(s.gpu_ms, ".2f"),
            _fmt(s.h2d_mb, ".2f"),
            _fmt(None if s.pageable_frac is None else s.pageable_frac * 100, ".0f", "%"),
            _fmt(s.host_syncs, ".0f"),
            _fmt(s.peak_mem_gb, ".2f"),
        )
    return Group(*lines, table)
