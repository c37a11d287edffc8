"""docs/THRESHOLDS.md is generated from the code: the committed page equals what the code says."""

from __future__ import annotations

from pathlib import Path

from gpudoctor.analysis.thresholds import threshold_table
from gpudoctor.report.thresholds_doc import COMMAND, thresholds_markdown

DOC = Path(__file__).resolve().parents[3] / "docs" / "THRESHOLDS.md"


def test_committed_page_equals_the_generated_one() -> None:
    assert DOC.read_text(encoding="utf-8") == thresholds_markdown(), f"regenerate it: {COMMAND}"


def test_every_threshold_has_a_row() -> None:
    text = thresholds_markdown()
    for info in threshold_table():
        assert f"| `{info.name}` |" in text
