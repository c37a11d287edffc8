"""Render ``gpudoctor explain``: the root cause(s) in full, consequences in one line each, and an
honest 'not known' with what could be extracted when nothing matched.

Rendering only: every word of cause, verification and fix comes from the catalog.
"""

from __future__ import annotations

from rich.console import Console, Group
from rich.padding import Padding
from rich.table import Table
from rich.text import Text

from gpudoctor.records.explain import ExplainMatch, ExplainReport, ExtractedError
from gpudoctor.report.fit import Verbatim, print_whole

_BANDS = ((0.8, "high", "green"), (0.5, "medium", "yellow"), (0.0, "low", "dim"))
_MAX_LINE = 160


def _band(confidence: float) -> tuple[str, str]:
    return next((name, style) for floor, name, style in _BANDS if confidence >= floor)


def _ranks(ranks: tuple[int, ...]) -> str:
    if not ranks:
        return ""
    if len(ranks) > 2 and ranks == tuple(range(ranks[0], ranks[-1] + 1)):
        return f"ranks {ranks[0]}-{ranks[-1]}"
    label = "rank" if len(ranks) == 1 else "ranks"
    return f"{label} {','.join(str(r) for r in ranks)}"


def _clip(text: str, limit: int = _MAX_LINE) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _where(match: ExplainMatch) -> str:
    parts = [match.category, match.entry_id]
    if match.ranks:
        parts.append(_ranks(match.ranks))
    parts.append(f"line {match.line_no}")
    if match.occurrences > 1:
        parts.append(f"seen {match.occurrences}x")
    return " · ".join(parts)


def match_block(number: int, match: ExplainMatch) -> Group:
    """One root-cause match in full: title, evidence, cause, how to verify, fix, links."""
    band, style = _band(match.confidence)
    head = Text(f"{number}. ", style="bold")
    head.append(match.title, style="bold")
    meta = Text(_where(match), style="dim")
    meta.append(" · confidence ", style="dim")
    meta.append(f"{band} ({match.confidence:.2f})", style=style)
    evidence = Text("> ", style="dim")
    evidence.append(_clip(match.matched_line))
    parts: list = [meta, evidence]
    if match.context is not None and match.context.last_frame:
        parts.append(Text(f"at {match.context.last_frame}", style="dim"))
    for note in match.notes:
        parts.append(Text(f"note: {note}", style="cyan"))
    details = Table.grid(padding=(0, 1))
    details.add_column(no_wrap=True, style="bold", min_width=_LABEL)
    details.add_column(ratio=1)
    details.add_row("Cause", Text(match.cause))
    parts.append(details)
    # verification, fix and links hold commands, code and URLs: Verbatim, so that print_whole
    # prints each item on one line that copies whole
    lists = [_verbatim_items(label, items) for label, items in
             (("Verify", match.verify), ("Fix", match.fix), ("Read", match.links)) if items]
    return Group(head, Padding(Group(*parts), (0, 0, 0, 3)), *lists)


_LABEL = 6  # the width of "Verify", the longest label


def _verbatim_items(label: str, items: tuple[str, ...]) -> Verbatim:
    text = Verbatim()
    for i, item in enumerate(items):
        text.append("   " + (label if i == 0 else "").ljust(_LABEL) + " ", style="bold")
        text.append(f"• {item}" + ("\n" if i < len(items) - 1 else ""))
    return text


def _secondary_line(match: ExplainMatch) -> Group:
    band, _ = _band(match.confidence)
    title = Text("  • ")
    title.append(match.title)
    return Group(title, Text(f"    {_where(match)} · {band}", style="dim"))


def _extracted_block(errors: tuple[ExtractedError, ...], limit: int = 5) -> Group:
    rows: list[Text] = []
    for error in errors[:limit]:
        line = Text("  ")
        line.append(error.exception_type or "message", style="bold")
        if error.message:
            line.append(": " + _clip(error.message, 140))
        rows.append(line)
        where = [f"line {error.line_no}"]
        if error.last_frame:
            where.insert(0, f"at {error.last_frame}")
        if error.ranks:
            where.append(_ranks(error.ranks))
        if error.occurrences > 1:
            where.append(f"seen {error.occurrences}x")
        rows.append(Text("    " + " · ".join(where), style="dim"))
    if len(errors) > limit:
        rows.append(Text(f"  … and {len(errors) - limit} more", style="dim"))
    return Group(*rows)


def _header(report: ExplainReport) -> Text:
    n = len(report.matches)
    text = Text("gpudoctor explain: ", style="bold")
    if n:
        text.append(f"{n} known failure{'s' if n != 1 else ''} matched")
    else:
        text.append("no known failure matched", style="yellow")
    text.append(f" in {report.lines_read} line{'s' if report.lines_read != 1 else ''}")
    if report.ranks_seen:
        text.append(f" · {_ranks(report.ranks_seen)} seen")
    return text


def _launcher(report: ExplainReport) -> Text | None:
    failure = report.launcher
    if failure is None:
        return None
    who = f"rank {failure.rank}" if failure.rank is not None else f"local rank {failure.local_rank}"
    text = Text(f"torchrun: {who} failed first", style="bold")
    if failure.exitcode is not None:
        text.append(f" (exitcode {failure.exitcode})")
    if failure.detail and not failure.detail.startswith("To enable traceback"):
        text.append(f": {_clip(failure.detail, 100)}")
    return text


def render_explain(report: ExplainReport, console: Console) -> None:
    """Print ``report``: header, root causes in full, consequences, or what could be extracted."""
    console.print(_header(report), highlight=False)
    launcher = _launcher(report)
    if launcher is not None:
        console.print(launcher, highlight=False)
    roots = [m for m in report.matches if m.role == "root"]
    secondary = [m for m in report.matches if m.role != "root"]
    if not roots and secondary:
        # only consequences matched: show the best of them in full, and say what is missing
        roots, secondary = secondary[:1], secondary[1:]
        console.print(Text(
            "Only consequences of another failure matched; the failing rank's own error is not in "
            "this text. Look for the first error on the rank torchrun names, or pass the full log.",
            style="yellow"), highlight=False)
    if roots:
        console.print()
        console.print(Text("Root cause" if len(roots) == 1 else "Root causes (most likely first)",
                           style="bold underline"), highlight=False)
        for number, match in enumerate(roots, start=1):
            print_whole(console, match_block(number, match), highlight=False)
    if secondary:
        console.print()
        console.print(Text("Also seen (likely consequences of the above)", style="bold underline"),
                      highlight=False)
        for match in secondary:
            console.print(_secondary_line(match), highlight=False)
    if not report.matches:
        console.print()
        if report.extracted:
            console.print(Text("What could be extracted:", style="bold"), highlight=False)
            console.print(_extracted_block(report.extracted), highlight=False)
        else:
            console.print(Text("No exception, traceback or error line was found in the input."),
                          highlight=False)
        console.print()
        console.print(Text(
            "This failure is not in the catalog. Search the exact message above in the PyTorch "
            "issue tracker, and rerun with CUDA_LAUNCH_BLOCKING=1 if it is a CUDA error.",
            style="dim"), highlight=False)
