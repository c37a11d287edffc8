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


def run(label: str, case_set: str = DEFAULT_SET) -> dict:
    cases_dir = FIXTURES / case_set
    cases = tomllib.loads((cases_dir / "cases.toml").read_text(encoding="utf-8"))
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
        }
    counts = {v: sum(1 for c in out.values() if c["verdict"] == v) for v in VERDICTS}
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
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--baseline", type=Path, help="an earlier --out to keep alongside")
    parser.add_argument("--table", action="store_true", help="print the markdown table")
    args = parser.parse_args()
    if not (FIXTURES / args.case_set / "cases.toml").is_file():
        parser.error(f"no case set {args.case_set!r}: expected tests/fixtures/{args.case_set}/cases.toml")
    result = run(args.label, args.case_set)
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
