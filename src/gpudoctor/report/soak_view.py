"""The soak summary of ``gpudoctor monitor --summary``: a stats table per GPU, throttle time by
reason, the memory trend, the host, and one verdict line per GPU. Pure rendering of
:class:`~gpudoctor.analysis.soak.SoakSummary`: every number comes from ``analysis/soak.py``.
"""

from __future__ import annotations

import datetime as _dt

from rich import box
from rich.console import Group
from rich.table import Table
from rich.text import Text

from gpudoctor.analysis.soak import SOAK_LIMITS, GpuSoak, HostSoak, MemoryTrend, SoakSummary
from gpudoctor.records.units import MIB, MISSING, human_bytes

_STYLE = {"stable": "green", "idle": "dim", "too_short": "yellow", "unstable": "bold red"}


def duration(seconds: float) -> str:
    """``45 s``, ``12.5 min``, ``3.2 h``."""
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.1f} min"
    return f"{seconds / 3600:.1f} h"


def _clock(t: float) -> str:
    return _dt.datetime.fromtimestamp(t, tz=_dt.timezone.utc).strftime("%Y/%m/%d %H:%M:%S")


def _num(v: float) -> str:
    return f"{v:.0f}" if abs(v) >= 100 else f"{v:.1f}"


def _stats_table(gpus: tuple[GpuSoak, ...]) -> Table:
    table = Table(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False, padding=(0, 1),
                  collapse_padding=True)
    for head, justify in (("GPU", "left"), ("metric", "left"), ("mean", "right"),
                          ("spread", "right"), ("min", "right"), ("max", "right"),
                          ("fluctuation", "right")):
        table.add_column(head, justify=justify, no_wrap=True)
    for g in gpus:
        for i, st in enumerate(g.stats):
            fluct = MISSING if st.fluctuation_pct is None else f"{st.fluctuation_pct:.1f} %"
            table.add_row(
                f"{g.index} {g.name.removeprefix('NVIDIA ')}" if i == 0 else "", st.label,
                _num(st.mean), _num(st.spread), _num(st.low), _num(st.high), fluct,
            )
        if not g.stats:
            table.add_row(f"{g.index} {g.name.removeprefix('NVIDIA ')}", "(no metric given)",
                          *[MISSING] * 5)
    return table


def _trend(t: MemoryTrend | None) -> str:
    if t is None:
        return MISSING
    rate = t.bytes_per_min / MIB
    if t.leak_like:
        shape = "rising, leak-like"
    elif abs(t.growth_bytes) < SOAK_LIMITS["leak_min_growth_bytes"].value:
        shape = "flat"
    elif t.span_s < SOAK_LIMITS["leak_min_span_s"].value:
        shape = f"too short to judge (a trend needs {duration(SOAK_LIMITS['leak_min_span_s'].value)})"
    else:
        shape = "changing, not a steady climb"
    return (f"{human_bytes(t.first_bytes)} -> {human_bytes(t.last_bytes)} over "
            f"{duration(t.span_s)}, {rate:+.1f} MiB/min (fit r² {t.fit.r2:.2f}): {shape}")


def _throttle(g: GpuSoak) -> str:
    if not g.throttle_s:
        return "none"
    return ", ".join(f"{reason} {duration(s)} ({g.throttle_share(reason):.1%})"
                     for reason, s in g.throttle_s)


def _host(h: HostSoak) -> str:
    cpu = MISSING if h.cpu is None else f"{h.cpu.mean:.0f} % ± {h.cpu.spread:.0f}"
    return f"host: CPU {cpu}; {h.memory_of} {_trend(h.memory)}"


def verdict_lines(g: GpuSoak) -> list[str]:
    """``soak verdict: GPU 0 stable: ...`` with the figures behind it; one indented line per
    problem under an unstable (or too short) GPU's verdict."""
    lim = SOAK_LIMITS
    util = g.stat("util_gpu_pct")
    fluct = None if util is None else util.fluctuation_pct
    head = f"soak verdict: GPU {g.index} {g.verdict.replace('_', ' ')}"
    short = ""
    if g.verdict == "too_short":
        short = (f"{head}: {g.samples} samples over {duration(g.end_s - g.start_s)}; soak longer "
                 "(seed 002 §6: every 5 s for 24 h, --interval 5)")
        if not g.problems:
            return [short]
    if g.verdict == "idle":
        return [f"{head}: mean utilization {util.mean:.0f} % (under "
                f"{lim['idle_util_pct'].value:.0f} %), nothing ran to judge"]
    reasons = []
    for code in g.problems:
        if code == "fluctuation":
            reasons.append(f"utilization fluctuates {fluct:.1f} % (limit "
                           f"{lim['fluctuation_pct'].value:.0f} %): the job stalls at times "
                           "(data loading, checkpoints, other jobs); `gpudoctor run --full` says which")
        elif code == "throttle":
            worst = [r for r, _ in g.throttle_s
                     if g.throttle_share(r) >= lim["throttle_share"].value]
            reasons.append(
                "clocks held back by " + ", ".join(
                    f"{r} {g.throttle_share(r):.0%}" for r in worst) + " of the time: check cooling, "
                "the power limit (nvidia-smi -q -d POWER) and the board's airflow")
        elif code == "memory_rising":
            m = g.memory
            reasons.append(
                f"memory used rising {m.bytes_per_min / MIB:+.1f} MiB/min for {duration(m.span_s)} "
                f"(fit r² {m.fit.r2:.2f}), still rising in the later half: leak-like (a tensor "
                "kept across steps, e.g. a loss summed with its graph); `gpudoctor memory -- CMD` "
                "finds it")
        elif code == "ecc":
            reasons.append(f"{g.ecc_errors} uncorrected ECC errors: a hardware fault; drain the GPU "
                           "and run the vendor's diagnostics")
    if short:
        return [f"{short}; so far:", *(f"  - {r}" for r in reasons)]
    if not reasons:
        parts = [MISSING if fluct is None else
                 f"utilization fluctuates {fluct:.1f} % (< {lim['fluctuation_pct'].value:.0f} %)"]
        parts.append("no throttling" if not g.throttle_s else "throttling under "
                     f"{lim['throttle_share'].value:.0%} of the time")
        parts.append("memory flat" if g.memory is None or not g.memory.leak_like else "")
        return [f"{head}: " + ", ".join(p for p in parts if p)]
    return [head, *(f"  - {r}" for r in reasons)]


def render_soak(summary: SoakSummary) -> Group:
    """Build the soak summary view."""
    if not summary.gpus:
        parts: list = [Text("soak summary: no GPU samples", style="yellow")]
        if summary.host is not None:
            parts.append(Text(_host(summary.host)))
        return Group(*parts)
    first = min(g.start_s for g in summary.gpus)
    last = max(g.end_s for g in summary.gpus)
    n = len(summary.gpus)
    parts = [
        Text(f"soak summary: {n} GPU{'s' if n > 1 else ''}, {duration(last - first)} "
             f"({_clock(first)} -> {_clock(last)} UTC), "
             f"{max(g.samples for g in summary.gpus)} samples a GPU"),
        _stats_table(summary.gpus),
    ]
    gap = max(g.gap_s for g in summary.gpus)
    if gap > 0:
        parts.insert(1, Text(f"(the log pauses for {duration(gap)} in all: runs appended to one "
                             "log? those pauses count for no throttling)", style="dim"))
    for g in summary.gpus:
        parts.append(Text(f"GPU {g.index} throttled: {_throttle(g)}"))
        parts.append(Text(f"GPU {g.index} memory used: {_trend(g.memory)}"))
    if summary.host is not None:
        parts.append(Text(_host(summary.host)))
    for g in summary.gpus:
        head, *reasons = verdict_lines(g)
        style = _STYLE.get(g.verdict, "")
        parts.append(Text(head, style=style))
        if reasons:  # a hanging indent: wrapped lines stay under their reason
            grid = Table.grid(padding=(0, 1))
            grid.add_column(no_wrap=True)
            grid.add_column()
            for r in reasons:
                grid.add_row("  -", Text(r.removeprefix("  - "), style=style))
            parts.append(grid)
    return Group(*parts)


__all__ = ["duration", "render_soak", "verdict_lines"]
