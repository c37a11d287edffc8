"""Helpers for the explain tests: fixture logs with their '#' citation header removed; the held-out
sets' judgement."""

from __future__ import annotations

from pathlib import Path

import pytest

EXPLAIN_FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "explain"


def fixture_text(name: str) -> str:
    """A fixture log without its leading '#' comment lines (which cite the message sources)."""
    lines = (EXPLAIN_FIXTURES / name).read_text(encoding="utf-8").splitlines()
    return "\n".join(line for line in lines if not line.startswith("#")) + "\n"


@pytest.fixture
def explain_fixtures() -> Path:
    return EXPLAIN_FIXTURES


def top_cause(text: str) -> tuple[str | None, list[str]]:
    """The entry explain puts first (its matches are ranked with the root causes first), and all."""
    from gpudoctor.explain import explain_text

    ids = [m.entry_id for m in explain_text(text).matches]
    return (ids or [None])[0], ids


def check_heldout_case(folder: Path, name: str, case: dict) -> None:
    """A held-out case gets its root cause first, or, where no catalog entry fits, no guess."""
    from gpudoctor.explain.catalog import load_catalog

    known = {e.id for e in load_catalog().entries}
    first, ids = top_cause((folder / "logs" / f"{name}.log").read_text(encoding="utf-8"))
    if any(e in known for e in case["expected"]):
        assert first in case["expected"], ids
    else:
        assert first is None, ids
