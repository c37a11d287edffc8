"""Render ``gpudoctor check``: a table grouped by layer, then the one-line verdict.

Rendering only: every word of evidence and fix comes from the rules.
"""

from __future__ import annotations

from collections.abc import Sequence

from rich.console import Console
from rich.table import Table
from rich.text import Text

from gpudoctor.records.env import CheckReport, EnvDifference, Verdict

STYLES = {Verdict.PASS: "green", Verdict.WARN: "yellow", Verdict.FAIL: "bold red",
          Verdict.SKIP: "dim"}


def check_table(report: CheckReport) -> Table:
    """The rows of ``report`` as a rich table, one section per layer."""
    table = Table(title="gpudoctor check", show_lines=False, expand=True, title_justify="left")
    table.add_column("Check", no_wrap=True)
    table.add_column("Verdict", no_wrap=True)
    table.add_column("Evidence / fix", ratio=1)
    layer = None
    for result in report.results:
        if result.layer is not layer:
            if layer is not None:
                table.add_section()
            table.add_row(Text(f"{result.layer.value} layer", style="bold"), "", "")
            layer = result.layer
        cell = Text(result.evidence)
        if result.fix:
            cell.append("\nfix: ", style="bold")
            cell.append(result.fix)
        table.add_row(f"  {result.name}",
                      Text(result.verdict.value.upper(), style=STYLES[result.verdict]), cell)
    return table


def verdict_line(report: CheckReport) -> Text:
    """The one-line verdict, coloured by the worst row."""
    worst = report.worst
    text = Text(report.summary, style=STYLES.get(worst, ""))
    text.append(f"  ({report.duration_ms / 1000:.1f} s)", style="dim")
    return text


def differences_table(differences: Sequence[EnvDifference], source: str) -> Table:
    """``--against``: what differs from the frozen environment and why it matters."""
    table = Table(title=f"differences from {source}", expand=True, title_justify="left")
    table.add_column("What", no_wrap=True)
    table.add_column("Here")
    table.add_column("There")
    table.add_column("Why it matters", ratio=1)
    for diff in differences:
        why = Text(f"changes {diff.changes}: ", style="bold") if diff.changes else Text("")
        why.append(diff.why)
        table.add_row(Text(diff.field, style=STYLES[diff.verdict]), diff.here, diff.there, why)
    return table


def render_check(console: Console, report: CheckReport, *,
                 differences: Sequence[EnvDifference] | None = None,
                 against: str = "", frozen_to: str = "") -> None:
    """Print the table, the differences (when compared) and the verdict line."""
    console.print(check_table(report))
    if differences is not None:
        if differences:
            console.print(differences_table(differences, against))
        else:
            console.print(f"No differences from {against} that change results or speed.")
    if frozen_to:
        console.print(f"Environment frozen to {frozen_to}.")
    console.print(verdict_line(report))
