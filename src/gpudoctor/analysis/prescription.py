"""Shared shapes of a prescription: a performance finding graded by its expected gain, and the
number formats evidence lines use (so every rule words its numbers the same way)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import TypeVar

from gpudoctor.analysis.thresholds import Thresholds
from gpudoctor.records.finding import Finding, Severity
from gpudoctor.records.units import MISSING

R = TypeVar("R")


def pct(share: float | None) -> str:
    """A share as a percentage with one decimal, or ``n/a``."""
    return MISSING if share is None else f"{100.0 * share:.1f}%"


def ms(value: float | None) -> str:
    return MISSING if value is None else f"{value:.2f} ms"


def performance_finding(
    *,
    code: str,
    gain: float,
    thresholds: Thresholds,
    title: str,
    evidence: list[str],
    fix: str,
    data: tuple[tuple[str, float], ...] = (),
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
                    fix=fix.strip("\n"), expected_gain=round(gain, 4), data=data)]


def worst_rank(ranks: Sequence[R], rule: Callable[[R], list[Finding]],
               rank_of: Callable[[R], int]) -> list[Finding]:
    """The rank policy of the per-rank rules: run ``rule`` on every rank and keep the worst
    finding (most severe, then the largest expected gain; the lowest rank on a tie).

    With more than one rank, an evidence line names the rank and the other ranks where the rule
    fired too, so a problem on rank 3 of 8 is neither missed nor blamed on rank 0.
    """
    hits = [(rank_of(r), f) for r in ranks for f in rule(r)]
    if not hits:
        return []
    rank, worst = min(hits, key=lambda h: (-h[1].severity.rank, -(h[1].expected_gain or 0.0), h[0]))
    if len(ranks) < 2:
        return [worst]
    others = sorted({r for r, f in hits if r != rank and f.code == worst.code})
    line = f"rank {rank} of {len(ranks)} is the worst"
    line += f"; also seen on rank(s) {', '.join(map(str, others))}" if others else "; the other ranks do not show it"
    return [dataclasses.replace(worst, evidence=(*worst.evidence, line))]


__all__ = ["ms", "pct", "performance_finding", "worst_rank"]
