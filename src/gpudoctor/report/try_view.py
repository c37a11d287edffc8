"""``--try``: the before/after table — the prescription, verified by measurement.

Both arms run the same command with the same steps, interleaved (baseline, try, baseline, try,
...); the figures and the verdict come from :mod:`gpudoctor.analysis.try_compare`. A knob that
measured slower, within the noise or too little is "not recommended here", never the fix.
"""

from __future__ import annotations

from gpudoctor.analysis.try_compare import (
    FASTER,
    MIN_GAIN,
    NO_GAIN,
    ROWS,
    SLOWER,
    WITHIN_NOISE,
    TryComparison,
    compare,
)


def _fmt(value: float | None) -> str:
    if value is None:
        return "-"
    return f"{value:,.1f}" if abs(value) >= 10 else f"{value:.2f}"


def _change(before: float | None, after: float | None) -> str:
    if before is None or after is None or before == 0:
        return "-"
    return f"{(after / before - 1.0) * 100:+.0f}%"


def _pct(share: float | None) -> str:
    if share is None:
        return "-"
    return f"{share * 100:.1f}%" if share < 0.1 else f"{share * 100:.0f}%"


def try_rows(comparison: TryComparison) -> list[tuple[str, str, str, str]]:
    """(measure, baseline, with knobs, change) as display strings; shared by terminal and HTML."""
    rows = []
    for key, label in ROWS:
        if key == "throughput":
            label = f"throughput ({comparison.unit}, median of runs)"
        rows.append((label, _fmt(comparison.before[key]), _fmt(comparison.after[key]),
                     _change(comparison.before[key], comparison.after[key])))
    j = comparison.judgement
    if j is not None:
        rows.append(("runs", str(len(j.baseline)), str(len(j.tried)), ""))
        rows.append(("spread between runs (max-min)", _pct(j.spread_baseline), _pct(j.spread_try),
                     f"noise {_pct(j.noise)}" if j.noise is not None else ""))
    return rows


def _signed(value: float) -> str:
    return f"{value * 100:+.0f}%" if abs(value) >= 0.095 else f"{value * 100:+.1f}%"


def try_verdict(comparison: TryComparison) -> str:
    """The one-line verdict: the gain with its noise and run counts, and whether to apply it."""
    knobs = ", ".join(comparison.knobs)
    j = comparison.judgement
    if comparison.failed:
        return (f"the run with {knobs} {comparison.failed}: not recommended here - do not apply "
                "(its stdout.log says why)")
    if j is None or j.gain is None:
        return f"measured gain: unknown (a run recorded no steady-state steps) with {knobs}"
    noise = f" ± {_pct(j.noise)}" if j.noise is not None else ""
    n = f"n = {len(j.baseline)} baseline + {len(j.tried)} try runs"
    measured = f"{_signed(j.gain)}{noise} throughput with {knobs} ({n})"
    if j.verdict == FASTER:
        return f"measured gain: {measured}: above the run-to-run noise; apply it"
    if j.verdict == SLOWER:
        return f"measured loss: {measured}: not recommended here - do not apply"
    if j.verdict == NO_GAIN:
        return (f"measured: {measured}: not recommended here - below the {MIN_GAIN:.0%} "
                "worth a change")
    if j.verdict == WITHIN_NOISE:
        return (f"within the noise: {measured}: not recommended here - no gain measurable "
                "above the run-to-run spread")
    return f"measured: {measured}"


def render_try(comparison: TryComparison):
    """A rich renderable: the table, what the knobs did, and the one-line verdict."""
    from rich.console import Group
    from rich.table import Table
    from rich.text import Text

    table = Table(title="--try: the fix, measured (same command and steps, runs interleaved)",
                  title_justify="left", caption=f"knobs: {', '.join(comparison.knobs)}",
                  caption_justify="left")
    table.add_column("")
    table.add_column("baseline", justify="right")
    table.add_column("with knobs", justify="right")
    table.add_column("change", justify="right")
    for row in try_rows(comparison):
        table.add_row(*row)
    parts = [table]
    parts += [Text(f"  {note}") for note in comparison.notes]
    verdict = comparison.judgement.verdict if comparison.judgement is not None else ""
    style = "bold green" if verdict == FASTER else ("bold red" if verdict == SLOWER or comparison.failed else "bold")
    parts.append(Text(try_verdict(comparison), style=style))
    return Group(*parts)


__all__ = ["TryComparison", "compare", "render_try", "try_rows", "try_verdict"]
