"""``gpudoctor explain`` on real error reports it was not written against (the held-out set).

    PYTHONPATH=src python benchmarks/explain_heldout.py --label before --out /tmp/before.json
    PYTHONPATH=src python benchmarks/explain_heldout.py --label after --baseline /tmp/before.json \
        --out benchmarks/results/explain_heldout.json --table

``--set NAME`` picks another case set, ``tests/fixtures/NAME/`` (default ``explain_heldout``, round
one; ``explain_heldout2`` is the second held-out set, built after round one's fixes).

The cases are ``tests/fixtures/<set>/cases.toml``: one log per public GitHub issue (only
its error lines), the issue's address and title, and the catalog entry ids that name the right root
cause. Each log goes through the real command, ``python -m gpudoctor explain --json LOG``, in a
fresh interpreter, and its first match (explain ranks the root causes first) is judged:

* ``right``: it is one of the expected entries;
* ``wrong``: it is another entry (a guess, when nothing in the catalog fits);
* ``unknown``: nothing matched and no expected entry exists in the catalog (the honest answer);
* ``missed``: nothing matched although the catalog has an expected entry.

``right + unknown`` are the correct answers; the score is their share of the cases.

``--heldout NAME`` reads a blind set from ``benchmarks/heldout/NAME/`` instead (its ``cases.toml``
says each case's root cause, resolution and ``resolution_keywords`` in words; the catalog entries
expected are in ``benchmarks/heldout/NAME.expected.toml``, written by the scorer before the first
run) and also judges the advice: a right answer's cause and fix text contain one of the case's
``resolution_keywords``.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = ROOT / "tests" / "fixtures"
HELDOUT = ROOT / "benchmarks" / "heldout"
DEFAULT_SET = "explain_heldout"
VERDICTS = ("right", "unknown", "wrong", "missed")


def catalog_ids() -> set[str]:
    from gpudoctor.explain.catalog import load_catalog

    return {e.id for e in load_catalog().entries}


def explain(log: Path) -> list[dict]:
    proc = subprocess.run(
        [sys.executable, "-m", "gpudoctor", "explain", "--json", "--fail-on", "never", str(log)],
        capture_output=True, text=True, check=True, cwd=ROOT,
    )
    return json.loads(proc.stdout)["report"]["matches"]


def judge(expected: list[str], matches: list[dict], known: set[str]) -> tuple[str, str | None]:
    """(verdict, the entry judged)."""
    if not matches:  # explain ranks its matches with the root causes first: the first is its answer
        return ("missed" if any(e in known for e in expected) else "unknown"), None
    first = matches[0]["entry_id"]
    return ("right" if first in expected else "wrong"), first


def load_set(case_set: str, heldout: bool) -> tuple[Path, dict]:
    """(folder, cases) of a fixture set, or of a blind set with its expected entries merged in."""
    if not heldout:
        cases_dir = FIXTURES / case_set
        return cases_dir, tomllib.loads((cases_dir / "cases.toml").read_text(encoding="utf-8"))
    cases_dir = HELDOUT / case_set
    cases = tomllib.loads((cases_dir / "cases.toml").read_text(encoding="utf-8"))
    expected = tomllib.loads((HELDOUT / f"{case_set}.expected.toml").read_text(encoding="utf-8"))
    for name, case in cases.items():
        case["expected"] = expected[name]
        case["why"] = f"{case['root_cause']} / fix: {case['resolution']}"
    return cases_dir, cases


def advice_fits(case: dict, match: dict | None) -> bool | None:
    """Whether the answer's cause and fix text name the thread's resolution (``None``: no keywords)."""
    keywords = [k.lower() for k in case.get("resolution_keywords", [])]
    if not keywords:
        return None
    if match is None:
        return False
    text = " ".join([match.get("cause") or "", *match.get("fix", []), *match.get("verify", [])]).lower()
    return any(k in text for k in keywords)


def run(label: str, case_set: str = DEFAULT_SET, heldout: bool = False) -> dict:
    cases_dir, cases = load_set(case_set, heldout)
    known = catalog_ids()
    out = {}
    for name, case in cases.items():
        matches = explain(cases_dir / "logs" / f"{name}.log")
        verdict, top = judge(case["expected"], matches, known)
        out[name] = {
            "source": case["source"],
            "title": case["title"],
            "expected": case["expected"],
            "expected_in_catalog": [e for e in case["expected"] if e in known],
            "why": case["why"],
            "matches": [[m["entry_id"], m["role"], m["confidence"]] for m in matches],
            "judged": top,
            "verdict": verdict,
            "advice_fits": advice_fits(case, matches[0] if matches else None) if verdict == "right" else None,
        }
    counts = {v: sum(1 for c in out.values() if c["verdict"] == v) for v in VERDICTS}
    rights = [c for c in out.values() if c["verdict"] == "right" and c["advice_fits"] is not None]
    counts["right_with_fitting_advice"] = sum(bool(c["advice_fits"]) for c in rights)
    counts["right_with_keywords"] = len(rights)
    return {
        "label": label,
        "set": case_set,
        "catalog_entries": len(known),
        "cases": len(out),
        "counts": counts,
        "correct": counts["right"] + counts["unknown"],
        "results": out,
    }


def table(before: dict, after: dict) -> str:
    rows = ["| case (issue) | issue title | expected (right root cause) | before | after |",
            "|---|---|---|---|---|"]
    for name, a in after["results"].items():
        b = before["results"].get(name, {})

        def cell(r: dict) -> str:
            if not r:
                return "-"
            return r["verdict"] + (f" (`{r['judged']}`)" if r.get("judged") else "")

        expected = ", ".join(f"`{e}`" for e in a["expected"]) or "nothing (a user-code bug)"
        title = a["title"].replace("|", "\\|")
        title = title if len(title) <= 90 else title[:87] + "..."
        rows.append(f"| [{name}]({a['source']}) | {title} | {expected} | {cell(b)} | {cell(a)} |")
    return "\n".join(rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--label", default="run")
    parser.add_argument("--set", dest="case_set", default=DEFAULT_SET,
                        help="case set: a folder under tests/fixtures/ with cases.toml and logs/")
    parser.add_argument("--heldout", action="store_true",
                        help="--set names a blind set under benchmarks/heldout/")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--baseline", type=Path, help="an earlier --out to keep alongside")
    parser.add_argument("--table", action="store_true", help="print the markdown table")
    args = parser.parse_args()
    base = HELDOUT if args.heldout else FIXTURES
    if not (base / args.case_set / "cases.toml").is_file():
        parser.error(f"no case set {args.case_set!r}: expected {base / args.case_set / 'cases.toml'}")
    result = run(args.label, args.case_set, args.heldout)
    result["command"] = " ".join(sys.argv)
    doc = {"after": result}
    if args.baseline:
        doc["before"] = json.loads(args.baseline.read_text())["after"]
    args.out.write_text(json.dumps(doc, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    for key in ("before", "after"):
        if key in doc:
            r = doc[key]
            print(f"{key} ({r['label']}, {r['catalog_entries']} entries): {r['correct']}/{r['cases']} "
                  f"correct; {r['counts']}")
    if args.table:
        print(table(doc.get("before", result), result))


if __name__ == "__main__":
    main()
