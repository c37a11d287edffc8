"""``docs/lint.md`` documents every rule (heading with its code, rationale, bad/good example) and
is exactly what ``python -m gpudoctor.lint.docs`` generates."""

from __future__ import annotations

from pathlib import Path

from gpudoctor.lint.docs import rules_markdown
from gpudoctor.lint.registry import ALL_RULES

DOC = Path(__file__).resolve().parents[3] / "docs" / "lint.md"


def test_docs_are_generated_from_the_rules() -> None:
    assert DOC.read_text(encoding="utf-8") == rules_markdown(), (
        "docs/lint.md is stale: run `PYTHONPATH=src python -m gpudoctor.lint.docs > docs/lint.md`")


def test_every_rule_has_a_section_with_rationale_and_examples() -> None:
    text = DOC.read_text(encoding="utf-8")
    for rule in ALL_RULES:
        heading = f"### {rule.CODE} {rule.NAME}\n"
        assert heading in text
        section = text.split(heading, 1)[1].split("\n### ", 1)[0]
        assert rule.RATIONALE in section and "Bad:" in section and "Good:" in section
