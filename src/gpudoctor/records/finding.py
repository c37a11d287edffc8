"""Findings: what an analysis concluded, with its evidence, the fix and the expected gain."""

from __future__ import annotations

import enum

from gpudoctor.records.base import record


class Severity(enum.Enum):
    """How much a finding matters. Ordered: ``INFO < WARN < ERROR``."""

    INFO = "info"
    WARN = "warn"
    ERROR = "error"

    @property
    def rank(self) -> int:
        return ("info", "warn", "error").index(self.value)


@record
class Finding:
    """One conclusion drawn from measurements.

    Attributes:
        code: stable identifier, e.g. ``"GD-RUN-DATALOADER"``; tests and ``--fail-on`` use it.
        severity: how much it matters.
        title: one line in plain words ("Data-loader bound: 41% of each step waits for data").
        evidence: the measured numbers behind it, as short lines.
        fix: the change to make, as a code snippet or a command.
        expected_gain: expected share of step time saved (0.0-1.0), ``None`` when unknown.
        docs_url: where to read more, or ``""``.
        data: the measured figures behind the finding that a program acts on, by name
            (``(("first_batch_wait_ms", 90.3), ("worker_restart", 1.0))``); each rule documents
            its own names. ``gpudoctor fix`` plans its changes from them, never from the prose.
    """

    code: str
    severity: Severity
    title: str
    evidence: tuple[str, ...] = ()
    fix: str = ""
    expected_gain: float | None = None
    docs_url: str = ""
    data: tuple[tuple[str, float], ...] = ()


def rank_findings(findings: list[Finding] | tuple[Finding, ...]) -> list[Finding]:
    """Order findings by expected gain (largest first), then severity, then code."""
    return sorted(
        findings,
        key=lambda f: (-(f.expected_gain or 0.0), -f.severity.rank, f.code),
    )
