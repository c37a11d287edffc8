"""``docs/explain.md`` is generated from the catalog, and its ``$ gpudoctor explain`` examples run."""

from __future__ import annotations

import shlex
from pathlib import Path

import pytest
from typer.testing import CliRunner

from gpudoctor.cli.app import app
from gpudoctor.explain import load_catalog
from gpudoctor.explain.docs import catalog_markdown

DOC = Path(__file__).resolve().parents[3] / "docs" / "explain.md"
EXAMPLES = [line[2:] for line in DOC.read_text(encoding="utf-8").splitlines() if line.startswith("$ gpudoctor explain")]


def test_docs_are_generated_from_the_catalog() -> None:
    assert DOC.read_text(encoding="utf-8") == catalog_markdown(), (
        "docs/explain.md is stale: run `PYTHONPATH=src python -m gpudoctor.explain.docs > docs/explain.md`")
    text = DOC.read_text(encoding="utf-8")
    assert all(f"`{e.id}`" in text for e in load_catalog().entries)


@pytest.mark.parametrize("command", EXAMPLES)
def test_docs_examples_run(command: str) -> None:
    args = shlex.split(command)[1:]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 1, result.output  # each example is a known failure: a finding
