"""Render ``gpudoctor check --cluster``: the nodes, what differs between them, the checks.

Rendering only: the values, verdicts, reasons and marks come from the analysis.
"""

from __future__ import annotations

from rich.console import Console
from rich.table import Table
from rich.text import Text

from gpudoctor.analysis.cluster_diff import number_list
from gpudoctor.records.cluster import ClusterReport
from gpudoctor.records.env import Verdict
from gpudoctor.report.check_view import STYLES

MARK = "!"  # a difference that can change results or speed (env_diff's `changes`)


def nodes_line(report: ClusterReport) -> Text:
    parts = [f"node {n.node} = {n.hostname} (rank{'s' if len(n.ranks) > 1 else ''} {number_list(n.ranks)})"
             for n in report.nodes]
    return Text("nodes: " + "; ".join(parts))


def differences_table(report: ClusterReport) -> Table:
    """One row per field that differs; each value with the nodes holding it."""
    table = Table(title="what differs between nodes", expand=True, title_justify="left")
    table.add_column("What", no_wrap=True)
    table.add_column("Value on", ratio=1)
    table.add_column("Why it matters", ratio=1)
    for d in report.differences:
        values = Text()
        for i, (where, value) in enumerate(d.values):
            values.append(("\n" if i else "") + f"{where}: ", style="bold")
            values.append(value)
        why = Text(f"changes {d.changes}: ", style="bold") if d.changes else Text("")
        why.append(d.why)
        table.add_row(Text(f"{MARK if d.changes else ' '} {d.field}", style=STYLES[d.verdict]), values, why)
    return table


def checks_table(report: ClusterReport) -> Table:
    table = Table(title="cluster checks", expand=True, title_justify="left")
    table.add_column("Check", no_wrap=True)
    table.add_column("Verdict", no_wrap=True)
    table.add_column("Evidence / fix", ratio=1)
    for c in report.checks:
        cell = Text(c.evidence)
        if c.fix:
            cell.append("\nfix: ", style="bold")
            cell.append(c.fix)
        table.add_row(c.name, Text(c.verdict.value.upper(), style=STYLES[c.verdict]), cell)
    return table


def render_cluster(console: Console, report: ClusterReport) -> None:
    """Print the nodes, the differences (or that there are none), the checks and the summary."""
    console.print(Text("gpudoctor check --cluster", style="bold"))
    console.print(nodes_line(report))
    if report.differences:
        console.print(differences_table(report))
        console.print(f"{MARK}: the difference can change results or speed (see its reason).")
    else:
        console.print("No differences between nodes in driver, CUDA, torch, NCCL, packages, "
                      "environment variables, GPUs or clocks.")
    console.print(checks_table(report))
    verdicts = {c.verdict for c in report.checks} | {d.verdict for d in report.differences}
    worst = next((v for v in (Verdict.FAIL, Verdict.WARN) if v in verdicts), Verdict.PASS)
    line = Text(report.summary, style=STYLES[worst])
    line.append(f"  ({report.duration_ms / 1000:.1f} s)", style="dim")
    console.print(line)
