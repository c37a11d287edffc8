"""Helpers for the explain tests: fixture logs with their '#' citation header removed."""

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
