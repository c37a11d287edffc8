"""Step time against the step index: a run that slows down as it goes, fitted on window medians.

Part of the step statistics (:mod:`gpudoctor.analysis.steps` builds every rank's
:class:`~gpudoctor.analysis.steps.RankStepStats` with its :class:`StepTrend`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from gpudoctor.analysis.linefit import LineFit, least_squares, median
from gpudoctor.analysis.thresholds import Thresholds
from gpudoctor.records.step import StepRecord


@dataclass(frozen=True, slots=True)
class StepTrend:
    """Step time against the step index over the steady steps: a run that slows down as it goes.

    The line is fitted to the medians of consecutive windows of steps (``trend_windows`` of
    them), not to every step: one step that waits on the scheduler or the allocator is a point
    far off any line and would drown a steady climb in a least-squares fit of single steps (a
    CPU run whose steps grew from 0.23 to 0.52 ms had R^2 0.01 over its steps, because of a few
    1-2 ms ones); a window's median ignores it and follows the climb.

    Attributes:
        fit: least-squares line of the windows' median ``step_ms`` against their mean step index.
        windows: how many windows (points) the line was fitted to.
        first_step, last_step: the steady steps it spans; ``first_t_s``/``last_t_s``: when
            they ended (the probes' clock), to read other samples over the same span.
        late_slope: the slope of the later half of the windows alone (``None`` with fewer than
            3 of them): a run still slowing down keeps climbing there, while a warm-up that
            outlasted the warm-up drop has levelled off.
    """

    fit: LineFit
    first_step: int
    last_step: int
    windows: int = 0
    first_t_s: float = 0.0
    last_t_s: float = 0.0
    late_slope: float | None = None
    first_window_ms: float = 0.0

    @property
    def first_ms(self) -> float:
        """The fitted time of the first steady step."""
        return self.fit.slope * self.first_step + self.fit.intercept

    @property
    def growth_ms(self) -> float:
        """What the fitted step time gained from the first steady step to the last."""
        return self.fit.slope * (self.last_step - self.first_step)

    @property
    def start_ms(self) -> float:
        """Where the climb starts: the fitted first step, or the first window's median when the
        line starts lower (a steep, noisy fit can start near or below zero: on a loaded CPU one
        run of a steadily slowing script fitted -0.6 ms at its first step)."""
        return max(self.first_ms, self.first_window_ms)

    @property
    def growth_frac(self) -> float:
        """``growth_ms`` over ``start_ms`` (0.0 when that is not positive)."""
        return self.growth_ms / self.start_ms if self.start_ms > 0 else 0.0

    @property
    def lost_share(self) -> float:
        """The share of the steady steps' (fitted) time spent beyond the first fitted step: what
        the slow-down cost the recorded run. On a line that is half the growth over the mean."""
        mean = self.start_ms + self.growth_ms / 2.0
        return max(0.0, self.growth_ms / 2.0) / mean if mean > 0 else 0.0


def step_trend(used: Sequence[StepRecord], thresholds: Thresholds) -> StepTrend | None:
    """Fit the step time against the step index over ``used``, window medians as the points:
    at most ``trend_windows`` windows of at least ``trend_min_window`` steps (``None`` with fewer
    than 3 windows)."""
    size = max(thresholds.trend_min_window, math.ceil(len(used) / thresholds.trend_windows))
    chunks = [list(used[i:i + size]) for i in range(0, len(used) - size + 1, size)]
    if chunks and len(used) % size:
        chunks[-1].extend(used[len(chunks) * size:])  # the remainder joins the last window
    xs = [sum(s.step for s in c) / len(c) for c in chunks]
    ys = [median([s.step_ms for s in c]) or 0.0 for c in chunks]
    fit = least_squares(xs, ys)
    if fit is None:
        return None
    half = len(xs) // 2
    late = least_squares(xs[half:], ys[half:])
    return StepTrend(fit=fit, first_step=used[0].step, last_step=used[-1].step, windows=len(chunks),
                     first_t_s=used[0].t_end_s, last_t_s=used[-1].t_end_s,
                     late_slope=None if late is None else late.slope, first_window_ms=ys[0])


__all__ = ["StepTrend", "step_trend"]
