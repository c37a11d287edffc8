"""The sixth held-out set (tests/fixtures/explain_heldout6, judged by
``benchmarks/explain_heldout.py --set explain_heldout6``) and the general fixes it led to.

The fixes are tested on message forms other than the held-out logs (other torch versions' wording,
other calls and devices), so they are not fitted to one issue's wording.
"""

from __future__ import annotations

import re
import tomllib

from gpudoctor.explain.catalog import load_catalog

from .conftest import EXPLAIN_FIXTURES

HELDOUT6 = EXPLAIN_FIXTURES.parent / "explain_heldout6"
CASES = tomllib.loads((HELDOUT6 / "cases.toml").read_text(encoding="utf-8"))
EARLIER = [
    tomllib.loads((EXPLAIN_FIXTURES.parent / name / "cases.toml").read_text(encoding="utf-8"))
    for name in ("explain_heldout", "explain_heldout2", "explain_heldout3", "explain_heldout4",
                 "explain_heldout5")
]
_ISSUE = re.compile(r"^https://github\.com/([^/]+/[^/]+)/(?:issues|pull)/(\d+)$")


def _short(source: str) -> str:
    found = _ISSUE.match(source)
    return f"{found[1]}#{found[2]}".lower() if found else source.lower()


def test_the_set_is_30_real_issues_none_from_earlier_rounds_or_a_catalog_sample() -> None:
    assert len(CASES) == 30
    earlier = {_short(c["source"]) for cases in EARLIER for c in cases.values()}
    samples = {_short(s.source) for e in load_catalog().entries for s in e.samples}
    seen: set[str] = set()
    for name, case in CASES.items():
        assert (HELDOUT6 / "logs" / f"{name}.log").is_file(), name
        assert case["title"] and case["why"], name
        assert _ISSUE.match(case["source"]), name
        short = _short(case["source"])
        assert short not in seen, name
        seen.add(short)
        assert short not in earlier, name
        assert short not in samples, name
