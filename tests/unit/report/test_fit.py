"""report.fit: a table that fits its width is printed as is; one that does not is stacked, with
no cell cut."""

from __future__ import annotations

import io

import pytest
from rich import box
from rich.console import Console
from rich.table import Table
from rich.text import Text

from gpudoctor.report.fit import Fit


def _table() -> Table:
    table = Table(title="Collectives", box=box.SIMPLE_HEAD, title_justify="left")
    table.add_column("", width=1)
    table.add_column("op", no_wrap=True)
    for head in ("size", "busbw", "p10–p90", "of link"):
        table.add_column(head, justify="right", no_wrap=True)
    table.add_column("verdict", ratio=1)  # a ratio column: rich would cut it below its longest word
    table.add_row("*", "reduce_scatter", "1 GiB", "328", "325–330", "73%", Text("normal, measured twice"))
    table.add_row("", "all_gather", "1 GiB", "150", "148–151", "33%", "LOW")
    return table


def _render(width: int) -> str:
    console = Console(file=io.StringIO(), width=width, color_system=None)
    console.print(Fit(_table()))
    return console.file.getvalue()


def test_a_table_that_fits_is_printed_as_a_table() -> None:
    text = _render(120)
    assert "reduce_scatter   1 GiB" in text and "normal, measured twice" in text


@pytest.mark.parametrize("width", [40, 60])
def test_a_table_too_wide_is_stacked_and_nothing_is_cut(width: int) -> None:
    text = _render(width)
    lines = text.splitlines()
    assert "…" not in text and max(len(line) for line in lines) <= width
    assert lines[0] == "Collectives"
    assert lines[1] == " * reduce_scatter"  # the marker and the first named column head each block
    for field in ("size 1 GiB", "busbw 328", "p10–p90 325–330", "of link 73%", "verdict normal,", "busbw 150",
                  "verdict LOW"):
        assert field in text, field


def test_rich_would_have_cut_this_table() -> None:
    """The case Fit exists for: rich's own rendering at 60 columns crops the verdict column."""
    console = Console(file=io.StringIO(), width=60, color_system=None)
    console.print(_table())
    assert "…" in console.file.getvalue() or "normal, measured twice" not in console.file.getvalue()
