"""Shared shapes of a prescription: a performance finding graded by its expected gain, and the
number formats evidence lines use (so every rule words its numbers the same way)."""

from __future__ import annotations

from gpudoctor.analysis.thresholds import Thresholds
from gpudoctor.records.finding import Finding, Severity


def pct(share: float | None) -> str:
    """A share as a percentage with one decimal, or ``n/a``."""
    return "n/a" if share is None else f"{100.0 * share:.1f}%"


def ms(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.2f} ms"


def performance_finding(
    *,
    code: str,
    gain: float,
    thresholds: Thresholds,
    title: str,
    evidence: list[str],
    fix: str,
) -> list[Finding]:
    """A finding about speed, graded by its expected gain; nothing when the gain is below notice.

    WARN from ``thresholds.warn_gain``, INFO from ``thresholds.info_gain``; performance findings are
    never ERROR (ERROR is kept for a run that is wrong or will crash).
    """
    gain = max(0.0, min(1.0, gain))
    if gain < thresholds.info_gain:
        return []
    severity = Severity.WARN if gain >= thresholds.warn_gain else Severity.INFO
    return [Finding(code=code, severity=severity, title=title, evidence=tuple(evidence),
                    fix=fix.strip("\n"), expected_gain=round(gain, 4))]


__all__ = ["ms", "pct", "performance_finding"]
