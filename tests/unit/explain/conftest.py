"""Helpers for the explain tests: fixture logs with their '#' citation header removed; the held-out
sets' judgement."""

from __future__ import annotations

import re
import tomllib
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


# the held-out sets in the order they were built: each is checked fresh against those before it
HELDOUT_SETS = ("explain_heldout", "explain_heldout2", "explain_heldout3", "explain_heldout4", "explain_heldout5",
                "explain_heldout6", "explain_heldout7", "explain_heldout8", "explain_heldout9",
                "explain_heldout10")
_ISSUE = re.compile(r"^https://github\.com/([^/]+/[^/]+)/(?:issues|pull)/(\d+)$")
# a public page (Q&A, forum, blog): any http(s) address with a host
_PAGE = re.compile(r"^https?://[^/\s]+\.[a-z]{2,}(?:[/?]\S*)?$", re.IGNORECASE)
# discourse forums (discuss.pytorch.org, discuss.huggingface.co, forums.developer.nvidia.com): /t/<slug>/<topic>[/<post>]
_DISCOURSE = re.compile(r"^([^/]+)/t/(?:[^/]+/)?(\d+)(?:/\d+)?$")
# Stack Exchange sites (and their kiwix mirrors): /questions/<id>[/slug]
_QUESTION = re.compile(r"(stackoverflow\.com|[a-z]+\.stackexchange\.com|superuser\.com|serverfault\.com|askubuntu\.com)"
                       r"[^/]*/questions/(\d+)")


def heldout_cases(set_name: str) -> dict:
    return tomllib.loads((EXPLAIN_FIXTURES.parent / set_name / "cases.toml").read_text(encoding="utf-8"))


def issue_key(source: str) -> str:
    """One key per thread, whatever address form cites it: ``owner/repo#N`` of a GitHub issue or pull;
    ``host/t/N`` of a Discourse topic (any slug, any post number); ``site/q/N`` of a Stack Exchange
    question (also through a mirror that keeps the path); else the address without scheme, ``www.``,
    fragment and trailing slash (lower case)."""
    found = _ISSUE.match(source)
    if found:
        return f"{found[1]}#{found[2]}".lower()
    page = re.sub(r"^https?://(?:www\.)?", "", source.strip().lower()).split("#", 1)[0].rstrip("/")
    question = _QUESTION.search(page)
    if question:
        return f"{question[1]}/q/{question[2]}"
    topic = _DISCOURSE.match(page)
    return f"{topic[1]}/t/{topic[2]}" if topic else page


def check_fresh_set(set_name: str, size: int, pages: bool = False) -> None:
    """``size`` real reports, each thread once, each with its log, title and why, none the source of a
    case of an earlier set or of a catalog sample (compared by :func:`issue_key`). Rounds one to eight
    cite GitHub issues; ``pages=True`` (round nine on) takes any public page address instead."""
    from gpudoctor.explain.catalog import load_catalog

    cases = heldout_cases(set_name)
    assert len(cases) == size
    earlier = {issue_key(c["source"]) for s in HELDOUT_SETS[:HELDOUT_SETS.index(set_name)]
               for c in heldout_cases(s).values()}
    samples = {issue_key(s.source) for e in load_catalog().entries for s in e.samples}
    seen: set[str] = set()
    for name, case in cases.items():
        assert (EXPLAIN_FIXTURES.parent / set_name / "logs" / f"{name}.log").is_file(), name
        assert case["title"] and case["why"] and (_PAGE if pages else _ISSUE).match(case["source"]), name
        key = issue_key(case["source"])
        assert key not in seen and key not in earlier and key not in samples, name
        seen.add(key)
