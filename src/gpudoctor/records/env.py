"""Environment check results: one row per check, grouped by layer."""

from __future__ import annotations

import enum

from gpudoctor.records.base import record


class Verdict(enum.Enum):
    """A check's outcome. ``SKIP`` means it could not run because a lower layer failed or is absent."""

    PASS = "pass"
    WARN = "warn"
    FAIL = "fail"
    SKIP = "skip"


class Layer(enum.Enum):
    """The layers of a GPU training stack, bottom first; a failure low down explains those above."""

    DRIVER = "driver"
    RUNTIME = "runtime"
    DEVICES = "devices"
    CONTEXT = "context"
    COMPUTE = "compute"
    LIBRARIES = "libraries"
    COMMUNICATION = "communication"
    HOST = "host"


@record
class CheckResult:
    """One row of ``gpudoctor check``.

    Attributes:
        layer: the layer the check belongs to.
        name: short stable name, e.g. ``"driver.version"``.
        verdict: pass / warn / fail / skip.
        evidence: what was observed, in one or two lines.
        fix: what to do when the verdict is not pass; ``""`` otherwise.
        duration_ms: how long the check took.
    """

    layer: Layer
    name: str
    verdict: Verdict
    evidence: str
    fix: str = ""
    duration_ms: float = 0.0


@record
class CheckReport:
    """All rows of one ``gpudoctor check`` run plus a one-line summary."""

    results: tuple[CheckResult, ...]
    summary: str
    duration_ms: float = 0.0

    @property
    def worst(self) -> Verdict:
        order = (Verdict.SKIP, Verdict.PASS, Verdict.WARN, Verdict.FAIL)
        worst = Verdict.PASS
        for result in self.results:
            if order.index(result.verdict) > order.index(worst):
                worst = result.verdict
        return worst
