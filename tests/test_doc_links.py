"""The documents' links and file paths lead to files that exist; every benchmark result is indexed.

README.md, docs/*.md and the indexes under benchmarks/ link to results, pages and scripts by
relative path, and name files from the repository root in code spans (`benchmarks/peers.py`); a
rename or a move that forgets one shows up here. Every file under
benchmarks/results/ is named in benchmarks/results/README.md (current) or in
benchmarks/results/history/README.md (superseded), so nobody has to guess which figure is live.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
HISTORY = RESULTS / "history"

# [text](target) and ![alt](target); the target stops at whitespace or ")" (a title may follow).
LINK = re.compile(r"!?\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
# Code spans and fenced blocks hold commands and examples, not links.
FENCE = re.compile(r"^(```|~~~).*?^\1", re.M | re.S)
CODE_SPAN = re.compile(r"`[^`\n]*`")


def _documents() -> list[Path]:
    docs = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    docs += sorted((ROOT / "benchmarks").rglob("README.md"))
    # the blind case sets describe themselves relative to their own folder and stay as written
    heldout = ROOT / "benchmarks" / "heldout"
    return [p for p in docs if p.is_file() and heldout not in p.parents]


def _relative_links(text: str) -> list[str]:
    text = CODE_SPAN.sub("", FENCE.sub("", text))
    out = []
    for target in LINK.findall(text):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target, re.I) or target.startswith("#"):
            continue  # a web address, mailto:, or an anchor on the same page
        out.append(target.split("#", 1)[0])
    return out


@pytest.mark.parametrize("doc", _documents(), ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_point_at_existing_files(doc: Path) -> None:
    links = _relative_links(doc.read_text(encoding="utf-8"))
    missing = [t for t in links if not (doc.parent / t).exists()]
    assert not missing, f"{doc.relative_to(ROOT)} links to paths that do not exist: {missing}"


# A file named in a code span by its path from the repository root, e.g. `benchmarks/run_overhead.py`.
REPO_PATH = re.compile(r"`((?:bench|benchmarks|docs|src|tests|tools)/[^`\s<>*]*\.[A-Za-z]+)`")


@pytest.mark.parametrize("doc", _documents(), ids=lambda p: str(p.relative_to(ROOT)))
def test_repository_paths_in_code_spans_exist(doc: Path) -> None:
    named = REPO_PATH.findall(FENCE.sub("", doc.read_text(encoding="utf-8")))
    missing = [p for p in named if not (ROOT / p).exists()]
    assert not missing, f"{doc.relative_to(ROOT)} names files that do not exist: {missing}"


def test_link_pattern_finds_links_and_skips_code() -> None:
    text = "see [a](x/y.md#top) and ![b](img.png \"t\") [w](https://e.org) [h](#here) `[c](no.md)`\n"
    text += "```\n[d](fenced.md)\n```\n"
    assert _relative_links(text) == ["x/y.md", "img.png"]
    assert REPO_PATH.findall("`benchmarks/a.py` `benchmarks/results/` `python benchmarks/b.py`") == ["benchmarks/a.py"]


def _indexed_names(index: Path) -> str:
    return index.read_text(encoding="utf-8")


def test_every_result_is_indexed_as_current_or_superseded() -> None:
    current, history = _indexed_names(RESULTS / "README.md"), _indexed_names(HISTORY / "README.md")
    unindexed = []
    for path in sorted(p for p in RESULTS.rglob("*") if p.is_file()):
        rel = path.relative_to(RESULTS)
        if path.name == "README.md":
            continue
        if rel.parts[0] == "history":
            if f"`{path.name}`" not in history:
                unindexed.append(str(rel))
        elif f"`{rel.as_posix()}`" not in current and f"`{rel.parts[0]}/`" not in current:
            unindexed.append(str(rel))
    assert not unindexed, (
        f"results named in neither benchmarks/results/README.md nor history/README.md: {unindexed}")
