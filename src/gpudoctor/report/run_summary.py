"""The terminal summary of a ``gpudoctor run``: how the run ended and what one step costs.

Figures skip the warm-up steps and the profiler window's steps (the profiler slows those), so
they describe the script's steady state.
"""

from __future__ import annotations

from gpudoctor.analysis.run_stats import run_stats
from gpudoctor.records.rundir import RunData
from gpudoctor.records.units import MISSING

STATUS_WORDS = {
    "completed": "ran to its end",
    "stopped": "stopped after the diagnostic window (--steps)",
    "crashed": "crashed",
    "interrupted": "interrupted (Ctrl-C)",
    "no_steps": "exited without any optimizer step",
    "timeout": "stopped: no optimizer step before the first-step timeout",
    "stalled": "stalled: no optimizer step for too long; stopped, with every rank's stacks",
    "running": "did not finish writing its manifest",
}


def _fmt(value: float | None, spec: str = ".1f", suffix: str = "") -> str:
    return MISSING if value is None else f"{value:{spec}}{suffix}"


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
        words = STATUS_WORDS.get(m.status, m.status)
        if m.compile_limit_s and m.status in ("timeout", "stalled"):
            words = f"stopped: compiling for over {m.compile_limit_s:g} s (--compile-timeout) without an optimizer step"
        lines.append(Text(
            f"status: {m.status} — {words}"
            + (f" (exit code {m.exit_code})" if m.exit_code not in (None, 0) else "")
        ))
    if m.knobs and full:
        lines.append(Text(f"knobs: {', '.join(m.knobs)}"))
    if m.error:
        lines.append(Text("error:\n" + "\n".join(m.error.splitlines()[-8:])))
    for note in m.notes:
        lines.append(Text(f"note: {note}"))
    if not full:
        return Group(*lines)
    stats = run_stats(run)
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
    notes = [Text(s.compile, style="dim") for s in stats if s.compile]
    notes += [Text(s.one_off, style="yellow") for s in stats if s.one_off]
    notes += [Text(s.history, style="dim") for s in stats if s.history]
    return Group(*lines, table, *notes)
