"""Order matches so the root cause comes first.

1. likely causes (role ``root``) before consequences (``secondary``: a watchdog timeout on rank 0
   is what a crash on rank 3 looks like from rank 0);
2. errors before warnings;
3. when torchrun named the first failed rank, matches seen on that rank first;
4. stronger evidence first (confidence band: high >= 0.8, medium >= 0.5, low);
5. the earliest failure in the log first.
"""

from __future__ import annotations

from gpudoctor.records.explain import ExplainMatch, LauncherFailure

HIGH = 0.8
MEDIUM = 0.5


def confidence_band(confidence: float) -> str:
    """``high``, ``medium`` or ``low``."""
    if confidence >= HIGH:
        return "high"
    return "medium" if confidence >= MEDIUM else "low"


_BAND_ORDER = {"high": 0, "medium": 1, "low": 2}


def rank_matches(
    matches: list[ExplainMatch], launcher: LauncherFailure | None
) -> tuple[ExplainMatch, ...]:
    """Sort by the rules in the module docstring."""
    failed_rank = launcher.rank if launcher is not None else None

    def key(m: ExplainMatch) -> tuple:
        on_failed_rank = 0 if failed_rank is not None and failed_rank in m.ranks else 1
        return (
            m.role != "root",
            m.severity != "error",
            on_failed_rank,
            _BAND_ORDER[confidence_band(m.confidence)],
            m.line_no,
            m.entry_id,
        )

    return tuple(sorted(matches, key=key))
