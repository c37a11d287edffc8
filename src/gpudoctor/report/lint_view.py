"""``gpudoctor lint --statistics``: how many violations of each code, most frequent first."""

from __future__ import annotations

from collections import Counter

from gpudoctor.records.lint import LintReport


def statistics_text(report: LintReport) -> str:
    """A plain table like ruff's ``--statistics``: count, code, fixable mark, one message."""
    counts = Counter(v.code for v in report.violations)
    fixable = {v.code for v in report.violations if v.fixable}
    first = {}
    for v in report.violations:
        first.setdefault(v.code, v.message)
    rows = sorted(counts.items(), key=lambda item: (-item[1], item[0]))
    width = max((len(str(n)) for n in counts.values()), default=1)
    lines = [f"{n:>{width}}  {code:<5} {'[*]' if code in fixable else '   '} {first[code]}" for code, n in rows]
    return "\n".join(lines) + ("\n" if lines else "")
