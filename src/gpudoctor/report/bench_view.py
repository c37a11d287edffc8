"""The ``gpudoctor bench`` view: one table per section, the notes (how each figure is counted and,
for a low one, what usually causes it), the link evidence, and what was skipped and why.
Pure rendering of a judged :class:`BenchReport`: no torch, no NVML, no clock.
"""

from __future__ import annotations

from rich import box
from rich.console import Group
from rich.table import Table
from rich.text import Text

from gpudoctor.records.bench import BenchReport, BenchResult, BenchVerdict, LinkState
from gpudoctor.records.units import MISSING
from gpudoctor.records.units import figure as num
from gpudoctor.report.fit import Fit

_TITLES = {
    "matmul": "Matmul",
    "copy": "Copies",
    "collectives": "Collectives (GB/s; busbw by the nccl-tests formulas)",
    "loader": "DataLoader",
}
_STYLE = {
    BenchVerdict.NORMAL: "green",
    BenchVerdict.LOW: "bold red",
    BenchVerdict.HIGH: "yellow",
    BenchVerdict.UNJUDGED: "dim",
}


def _range(r: BenchResult) -> str:
    return MISSING if r.p10 is None or r.p90 is None else f"{num(r.p10)}–{num(r.p90)}"


def _fraction(r: BenchResult) -> str:
    return "" if r.fraction_of_peak is None else f"{r.fraction_of_peak:.0%}"


_SHOWN = {
    BenchVerdict.NORMAL: "normal",
    BenchVerdict.LOW: "LOW",
    BenchVerdict.HIGH: "high",
    BenchVerdict.UNJUDGED: "—",
}


def _verdict(r: BenchResult) -> Text:
    return Text(_SHOWN[r.verdict], style=_STYLE[r.verdict])


def _columns(section: str, unit: str) -> tuple[str, ...]:
    if section == "collectives":
        return ("op", "size", "ms", "algbw", "busbw", "p10–p90", "of link")
    if section == "loader":
        return ("workers", "samples/s", "p10–p90", "ms/batch")
    if section == "matmul":
        return ("size", "dtype", unit, "p10–p90", "peak", "of peak")
    return ("op", "size", unit, "p10–p90", "peak", "of peak")


def _cells(section: str, r: BenchResult) -> tuple[str, ...]:
    if section == "collectives":
        return (r.op, r.size, num(r.time_ms), num(r.algbw_gbs), num(r.median), _range(r), _fraction(r))
    if section == "loader":
        return (r.size.removeprefix("workers="), num(r.median), _range(r), num(r.time_ms))
    peak = num(r.peak) if r.peak else ""
    if section == "matmul":
        return (r.size, r.dtype, num(r.median), _range(r), peak, _fraction(r))
    return (r.op, r.size, num(r.median), _range(r), peak, _fraction(r))


def _table(section: str, rows: list[BenchResult], notes: dict[str, int]) -> Table:
    """One section; the median is in the unit named in its column head."""
    table = Table(
        title=_TITLES.get(section, section), title_justify="left", box=box.SIMPLE_HEAD,
        pad_edge=False, title_style="bold",
    )
    text_heads = {"op", "size", "dtype", "workers"}
    for head in (*_columns(section, rows[0].unit), "verdict", "note"):
        table.add_column(head, justify="left" if head in text_heads | {"verdict", "note"} else "right", no_wrap=True)
    for r in rows:
        table.add_row(*_cells(section, r), _verdict(r), f"[{notes[r.note]}]" if r.note else "")
    return table


def _link_line(link: LinkState) -> str:
    def opt(v, fmt="{}"):
        return MISSING if v is None else fmt.format(v)

    parts = [f"GPU {link.index} {link.name}".rstrip()]
    if link.pcie_gen_current is not None or link.pcie_gen_max is not None:
        parts.append(
            f"PCIe Gen{opt(link.pcie_gen_current)} x{opt(link.pcie_width_current)} "
            f"(max Gen{opt(link.pcie_gen_max)} x{opt(link.pcie_width_max)})"
        )
    else:
        parts.append(f"PCIe {MISSING}")
    parts.append(f"NVLink {opt(link.nvlink_active_links)} active")
    if link.p2p_peers is not None:
        parts.append("P2P with " + (", ".join(f"GPU {p}" for p in link.p2p_peers) if link.p2p_peers else "none"))
    parts.append(f"power limit {opt(link.power_limit_w, '{:.0f}')}/{opt(link.default_power_limit_w, '{:.0f}')} W")
    parts.append(f"SM {opt(link.sm_clock_mhz)}/{opt(link.max_sm_clock_mhz)} MHz under load")
    parts.append("throttle: " + (", ".join(link.throttle_reasons) or "none"))
    line = " · ".join(parts)
    if link.unavailable:
        reasons = sorted(set(link.unavailable.values()))
        line += f" (not readable: {', '.join(sorted(link.unavailable))}: {'; '.join(reasons)})"
    return line


def render_bench(report: BenchReport) -> Group:
    """Rich renderable of a judged report."""
    parts: list = []
    gpus = f"{report.gpu_count} GPU{'s' if report.gpu_count != 1 else ''}" if report.gpu_count else "no GPU"
    parts.append(Text(
        f"gpudoctor bench — {report.device_name} ({gpus}), torch {report.torch_version}, "
        f"{report.duration_s:.1f} s", style="bold",
    ))
    notes: dict[str, int] = {}
    for r in report.results:
        if r.note and r.note not in notes:
            notes[r.note] = len(notes) + 1
    sections = []
    for r in report.results:
        if r.section not in sections:
            sections.append(r.section)
    for section in sections:
        # stacked when the terminal is too narrow for the table
        parts.append(Fit(_table(section, [r for r in report.results if r.section == section], notes)))
    if notes:
        parts.append(Text("Notes", style="bold"))
        for note, number in notes.items():
            parts.append(Text(f"[{number}] {note}"))
    if report.links:
        parts.append(Text("Links and power", style="bold"))
        parts.extend(Text(_link_line(link)) for link in report.links)
    if report.nccl_env:
        parts.append(Text("Environment: " + " ".join(f"{k}={v}" for k, v in report.nccl_env.items())))
    if report.skipped:
        parts.append(Text("Skipped", style="bold"))
        parts.extend(Text(f"- {s.section}: {s.what} — {s.reason}") for s in report.skipped)
    counts = {v: sum(1 for r in report.results if r.verdict is v) for v in BenchVerdict}
    summary = ", ".join(f"{n} {v.value}" for v, n in counts.items() if n)
    parts.append(Text(f"{len(report.results)} figures: {summary or 'none'}", style="bold"))
    return Group(*parts)
