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


def test_verbatim_code_is_printed_whole_by_print_whole() -> None:
    """Fix code copies whole: print_whole neither wraps nor crops a Verbatim line; any other
    print wraps it as plain Text (no cropping either way)."""
    from rich.console import Group

    from gpudoctor.report.fit import Verbatim, print_whole

    code = "loader = DataLoader(dataset, batch_size=128, num_workers=8, pin_memory=True, persistent_workers=True)"
    block = Group(Text("prose that wraps at the width like any other text, as it always did here"), Verbatim(code))
    console = Console(file=io.StringIO(), width=60, color_system=None)
    print_whole(console, block)
    lines = console.file.getvalue().splitlines()
    assert code in lines  # one line, longer than the 60 columns
    assert all(len(line) <= 60 for line in lines if line != code)
    plain = Console(file=io.StringIO(), width=60, color_system=None)
    plain.print(block)
    assert code not in plain.file.getvalue().splitlines() and "persistent_workers=True)" in plain.file.getvalue()


def test_run_findings_print_fix_code_whole(tmp_path) -> None:
    """`gpudoctor diagnose` at 80 columns: the fix's code lines, up to 89 characters, unbroken."""
    import subprocess
    import sys
    from pathlib import Path

    from tests.support.cli_runner import env

    import shutil

    run = tmp_path / "run"  # a copy: diagnose rewrites a stale findings.json
    shutil.copytree(Path(__file__).resolve().parents[2] / "fixtures" / "runs" / "basic_user", run)
    result = subprocess.run([sys.executable, "-m", "gpudoctor", "diagnose", str(run), "--fail-on", "never"],
                            cwd=tmp_path, env={**env(), "COLUMNS": "80"}, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    line = "num_workers=8,             # was 0: load in parallel processes"
    assert any(row.endswith(line) and len(row) > 80 for row in result.stdout.splitlines()), result.stdout
