"""``--try``: the before/after table — the prescription, verified by measurement.

Both runs use the same command, step count and profiler window; the figures are the
steady-state medians of :mod:`gpudoctor.report.run_summary`, summed over ranks for throughput.
"""

from __future__ import annotations

from dataclasses import dataclass

from gpudoctor.records.rundir import RunData
from gpudoctor.analysis.run_stats import StepStats, run_stats


@dataclass(frozen=True, kw_only=True)
class TryComparison:
    """Before/after figures. ``gain`` is the measured throughput change (0.25 = +25%)."""

    knobs: tuple[str, ...]
    unit: str
    before: dict[str, float | None]
    after: dict[str, float | None]
    gain: float | None


ROWS = (
    ("throughput", "throughput"),
    ("step_ms", "step time (ms)"),
    ("data_wait_ms", "data wait (ms/step)"),
    ("gpu_ms", "GPU time (ms/step)"),
    ("h2d_ms", "H2D copy issue (ms/step)"),
    ("host_syncs", "host syncs / step"),
)


def _combine(stats: list[StepStats]) -> tuple[dict[str, float | None], str]:
    if not stats:
        return {key: None for key, _ in ROWS}, "steps/s"
    lead = stats[0]  # per-step figures from the first rank; throughput summed over ranks
    thr = [s.throughput for s in stats]
    out: dict[str, float | None] = {key: getattr(lead, key) for key, _ in ROWS if key != "throughput"}
    out["throughput"] = sum(thr) if all(t is not None for t in thr) else None  # type: ignore[arg-type]
    return out, lead.unit


def compare(baseline: RunData, tried: RunData) -> TryComparison:
    """Compare the baseline run with the knobbed one."""
    before, unit = _combine(run_stats(baseline))
    after, unit_after = _combine(run_stats(tried))
    gain = None
    if unit == unit_after and before["throughput"] and after["throughput"] is not None:
        gain = after["throughput"] / before["throughput"] - 1.0
    return TryComparison(knobs=tuple(tried.manifest.knobs), unit=unit, before=before, after=after, gain=gain)


def _fmt(value: float | None) -> str:
    if value is None:
        return "-"
    return f"{value:,.1f}" if abs(value) >= 10 else f"{value:.2f}"


def _change(before: float | None, after: float | None) -> str:
    if before is None or after is None or before == 0:
        return "-"
    return f"{(after / before - 1.0) * 100:+.0f}%"


def try_rows(comparison: TryComparison) -> list[tuple[str, str, str, str]]:
    """(measure, baseline, with knobs, change) as display strings; shared by terminal and HTML."""
    rows = []
    for key, label in ROWS:
        if key == "throughput":
            label = f"throughput ({comparison.unit})"
        rows.append((label, _fmt(comparison.before[key]), _fmt(comparison.after[key]),
                     _change(comparison.before[key], comparison.after[key])))
    return rows


def try_verdict(comparison: TryComparison) -> str:
    if comparison.gain is None:
        return "measured gain: unknown (a run recorded no steady-state steps)"
    return f"measured gain: {comparison.gain * 100:+.0f}% throughput with {', '.join(comparison.knobs)}"


def render_try(comparison: TryComparison):
    """A rich renderable: the table and the one-line verdict."""
    from rich.console import Group
    from rich.table import Table
    from rich.text import Text

    table = Table(title="--try: the fix, measured (same command, same steps)", title_justify="left",
                  caption=f"knobs: {', '.join(comparison.knobs)}", caption_justify="left")
    table.add_column("")
    table.add_column("baseline", justify="right")
    table.add_column("with knobs", justify="right")
    table.add_column("change", justify="right")
    for row in try_rows(comparison):
        table.add_row(*row)
    return Group(table, Text(try_verdict(comparison)))
