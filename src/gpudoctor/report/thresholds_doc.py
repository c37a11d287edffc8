"""``docs/THRESHOLDS.md``, generated from the threshold table in :mod:`gpudoctor.analysis.thresholds`.

The page is never edited by hand: ``python -m gpudoctor.report.thresholds_doc --write
docs/THRESHOLDS.md`` rewrites it, and ``tests/unit/report/test_thresholds_doc.py`` fails while the
committed page differs from what the code says.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from gpudoctor.analysis.thresholds import ThresholdInfo, threshold_table
from gpudoctor.records.units import human_bytes

COMMAND = "python -m gpudoctor.report.thresholds_doc --write docs/THRESHOLDS.md"

_HEAD = f"""# Thresholds

Every limit the run analysis decides with, its default and the measurement or reason that set it.
Generated from `src/gpudoctor/analysis/thresholds.py` (`{COMMAND}`);
do not edit this page by hand: a test compares it with the code.

## Setting them

`gpudoctor run`, `gpudoctor diagnose` and `gpudoctor doctor` take `--thresholds FILE`, a TOML file
of `name = value` lines with names from the table below; the others keep their defaults:

```toml
# my-thresholds.toml: a noisy shared machine, report smaller gains, judge longer runs
info_gain = 0.02
warmup_steps = 10
straggler_min_ms = 5.0
```

    gpudoctor diagnose RUN_DIR --thresholds my-thresholds.toml

An unknown name, a value of the wrong type (a string, `true`, `2.5` for an integer) or a value
out of range (a negative number, a share above 1) is refused with exit code 2 and a message
naming the key. Findings computed with changed thresholds and stored (by `run`, `doctor` or
`diagnose --save`) are stamped with them in `findings.json` (`analysis_version` ends in `+thresholds-<digest>`), so a later `gpudoctor report`
recomputes them with the defaults rather than mixing the two.

Shares are fractions (0.0-1.0) of the median step time unless the reason says otherwise.

## The table

| name | type | default | reason |
|---|---|---|---|
"""


def _default(info: ThresholdInfo) -> str:
    text = f"{info.default:g}" if isinstance(info.default, float) else str(info.default)
    if info.name.endswith("_bytes") or info.name.endswith("_bytes_per_step"):
        text += f" ({human_bytes(info.default)})"
    return text


def thresholds_markdown() -> str:
    """The whole page, from :func:`~gpudoctor.analysis.thresholds.threshold_table`."""
    rows = [f"| `{t.name}` | {t.type}{' (share)' if t.share else ''} | {_default(t)} | "
            f"{t.reason.replace('|', '/')} |" for t in threshold_table()]
    return _HEAD + "\n".join(rows) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Print (or --write) docs/THRESHOLDS.md from the code.")
    parser.add_argument("--write", type=Path, metavar="PATH", help="write the page to PATH instead of stdout")
    args = parser.parse_args(argv)
    text = thresholds_markdown()
    if args.write is None:
        sys.stdout.write(text)
    else:
        args.write.write_text(text, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())


__all__ = ["COMMAND", "main", "thresholds_markdown"]
