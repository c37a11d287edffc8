"""The median and the least-squares line the step statistics are built on."""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass


def median(values: Sequence[float]) -> float | None:
    """Median of ``values``; ``None`` for an empty sequence."""
    return float(statistics.median(values)) if len(values) else None


@dataclass(frozen=True, slots=True)
class LineFit:
    """Least-squares line ``y = slope * x + intercept`` with its coefficient of determination."""

    slope: float
    intercept: float
    r2: float


def least_squares(xs: Sequence[float], ys: Sequence[float]) -> LineFit | None:
    """Fit a line by ordinary least squares; ``None`` with fewer than 3 points or constant ``xs``.

    ``r2`` is 1.0 when ``ys`` is constant (a flat line explains it fully).
    """
    n = len(xs)
    if n < 3 or n != len(ys) or len(set(xs)) < 2:
        return None
    slope, intercept = statistics.linear_regression(xs, ys)
    if len(set(ys)) < 2:
        return LineFit(slope=slope, intercept=intercept, r2=1.0)
    r = statistics.correlation(xs, ys)
    return LineFit(slope=slope, intercept=intercept, r2=max(0.0, min(1.0, r * r)))


__all__ = ["LineFit", "least_squares", "median"]
