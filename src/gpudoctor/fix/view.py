"""What ``gpudoctor fix`` prints: the unified diff, each change's measured verdict, the before/after
table and the loss of the first steps before and after.

Every figure is quoted, never recomputed: throughput and step time are the medians over each
arm's runs of :class:`gpudoctor.analysis.steps.RankStepStats` (through
:func:`gpudoctor.analysis.try_compare.compare`), GPU busy and MFU are the profiled run's
(:func:`gpudoctor.analysis.facts.run_facts`, :func:`gpudoctor.analysis.compute_rules.speed`).
"""

from __future__ import annotations

import dataclasses
import difflib
from collections.abc import Sequence
from dataclasses import dataclass

from gpudoctor.fix.ops import Advice, Change, OptionEdit
from gpudoctor.report.try_view import _change, _fmt, _pct, try_verdict

LOSS_STEPS = 10  # the first N steps whose loss is shown before and after


@dataclass(frozen=True, slots=True)
class Figures:
    """One arm's figures for the table (``None``: not measured)."""

    throughput: float | None = None
    unit: str = "samples/s"
    step_ms: float | None = None
    gpu_busy: float | None = None
    mfu: float | None = None


@dataclass(frozen=True, slots=True)
class Outcome:
    """A change and what its measurement said (``comparison`` ``None``: not measured)."""

    change: Change
    comparison: object | None = None  # TryComparison
    kept: bool = True
    label: str = ""


def figures(comparison, arm: str, run) -> Figures:
    """The table's figures for ``arm`` ("before"/"after") of ``comparison`` and its profiled ``run``."""
    from gpudoctor.analysis.compute_rules import speed
    from gpudoctor.analysis.facts import run_facts
    from gpudoctor.analysis.thresholds import Thresholds

    busy = mfu = None
    if run is not None and run.steps:
        ranks = run_facts(run, Thresholds()).ranks
        if ranks:
            busy = ranks[0].busy_frac
            sp = speed(ranks[0])
            mfu = sp.mfu if sp is not None else None
    values = getattr(comparison, arm) if comparison is not None else {}
    return Figures(throughput=values.get("throughput"), unit=getattr(comparison, "unit", "samples/s"),
                   step_ms=values.get("step_ms"), gpu_busy=busy, mfu=mfu)


def losses(run, n: int = LOSS_STEPS) -> list[float | None]:
    """The loss of the first ``n`` optimizer steps of the run's lowest rank (``None`` where unread)."""
    if run is None or not run.steps:
        return []
    records = sorted(run.steps[min(run.steps)], key=lambda s: s.step)[:n]
    return [s.loss for s in records]


def unified_diff(before: str, after: str, name: str) -> str:
    return "".join(difflib.unified_diff(before.splitlines(True), after.splitlines(True),
                                        fromfile=f"{name} (original)", tofile=f"{name} (fixed)"))


def label(change: Change) -> str:
    return f"{change.kind} (precision)" if change.precision else change.kind


def change_line(i: int, outcome: Outcome) -> str:
    """One line per change: what it is and what its measurement said."""
    head = f"{i}. {outcome.change.code}  {label(outcome.change)}: "
    if outcome.comparison is None:
        return head + ("not measured (--no-measure); applied" if outcome.kept else "not applied")
    comparison = dataclasses.replace(outcome.comparison, knobs=(label(outcome.change),))
    return head + try_verdict(comparison) + ("" if outcome.kept else "  -> dropped")


def table(before: Figures, after: Figures | None, title: str):
    """The before/after table as a rich renderable."""
    from rich.table import Table

    t = Table(title=title, title_justify="left")
    t.add_column("")
    t.add_column("before", justify="right")
    if after is not None:
        t.add_column("after", justify="right")
        t.add_column("change", justify="right")
    rows = [(f"throughput ({before.unit})", before.throughput, after.throughput if after else None, _fmt),
            ("step time (ms, median)", before.step_ms, after.step_ms if after else None, _fmt),
            ("GPU busy", before.gpu_busy, after.gpu_busy if after else None, _pct),
            ("MFU", before.mfu, after.mfu if after else None, _pct)]
    for name, b, a, fmt in rows:
        cells = [name, fmt(b)]
        if after is not None:
            cells += [fmt(a), _change(b, a)]
        t.add_row(*cells)
    return t


def loss_table(before: Sequence[float | None], after: Sequence[float | None], precision: Sequence[str]):
    """The loss of the first steps before and after, with the largest relative difference."""
    from rich.console import Group
    from rich.table import Table
    from rich.text import Text

    t = Table(title=f"loss, first {max(len(before), len(after))} steps", title_justify="left")
    for name in ("step", "before", "after", "difference"):
        t.add_column(name, justify="right")
    worst = None
    for i in range(max(len(before), len(after))):
        b = before[i] if i < len(before) else None
        a = after[i] if i < len(after) else None
        diff = abs(a - b) / abs(b) if a is not None and b not in (None, 0) else None
        worst = diff if diff is not None and (worst is None or diff > worst) else worst
        t.add_row(str(i), "-" if b is None else f"{b:.4f}", "-" if a is None else f"{a:.4f}", _pct(diff))
    note = (f"precision changed ({', '.join(precision)}): a small difference is the numerics asked for"
            if precision else "no precision change: a difference comes from the data order or randomness "
            "(e.g. augmentation in loader workers)")
    worst_text = f"largest difference {_pct(worst)}; " if worst is not None else ""
    return Group(t, Text(f"  {worst_text}{note}"))


def command_lines(said: Sequence[tuple[OptionEdit, tuple[str, str] | None]], command: str,
                  measured: bool) -> list[str]:
    """The script's command-line options whose defaults the patch sets: the ones the command line
    sets itself, with the value to give them instead (the value the patched copy was measured with),
    then the command to run; the others take their new default."""
    out = []
    for edit, how in said:
        was = f", was {edit.was}" if edit.was else ""
        if how is None:
            out.append(f"command line: {edit.name} is not on your command line: its new default applies "
                       f"({edit.value}{was})")
            continue
        out.append(f"command line: your command line sets {how[0]}, which overrides the new default; run with "
                   f"{how[1]} (the default of {edit.name} is now {edit.value}{was})"
                   + (", as the patched copy was measured:" if measured else ":"))
    if any(how is not None for _, how in said):
        out.append(f"    {command}")
    return out


def print_lines(console, lines: Sequence[str]) -> None:
    """Prose wrapped at the console's width; a line of code (indented 4) never wrapped, so it can be
    copied whole."""
    for line in lines:
        console.print(line, highlight=False, markup=False, soft_wrap=line.startswith("    "))


def advice_lines(advice: Sequence[Advice]) -> list[str]:
    """Findings that have a code fix but no patch: why, and the prescription as text."""
    out = []
    for a in advice:
        out.append(f"{a.code}: no patch ({a.reason}); the prescription:")
        out += [f"    {line}" for line in a.fix.splitlines()]
    return out


__all__ = ["LOSS_STEPS", "Figures", "Outcome", "advice_lines", "change_line", "command_lines", "figures", "label",
           "loss_table", "losses", "print_lines", "table", "unified_diff"]
