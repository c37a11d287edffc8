"""Deciding above the noise, pure: repeated measurements, their spread, and when a setting wins.

A setting is measured more than once (``repeats`` runs, interleaved with the settings it is
compared against, so a slow drift of the machine hits every arm alike). Its rate is the median of
its runs and its spread is half their range as a fraction of that median (``+-2%``). Two settings
run in the same rounds are compared round by round (:func:`compare`): the gain is the median of
the per-round ratios and the noise is the larger of the tolerance and the ratios' own spread, so
one disturbed round neither makes nor hides a winner. Unpaired runs fall back to the ratio of the
medians against the two spreads added. A setting beats another only when its gain exceeds
``1 + noise``; a winner inside the noise is not a winner: the starting value stays (:func:`pick`).
A noise band wider than :data:`NOISY` says the machine, not the setting, decided: :func:`too_noisy`
words what to do about it.
"""

from __future__ import annotations

import dataclasses
import statistics
from collections.abc import Sequence


# Beyond this the machine is too noisy to confirm a tuning gain: the gains tune writes are mostly
# 5-50% (precision, batch, loader), and an idle GPU box measures within a few percent round to
# round; a band wider than +-25% hides most real gains, and on a busy shared 2-core CPU box the
# confirmation measured +-1277% to +-2613% (tests/unit/tune/conftest.py).
NOISY = 0.25


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Measured:
    """One setting's runs: ``median`` samples/s and ``spread`` (half-range / median)."""

    rates: tuple[float, ...]
    median: float
    spread: float


def summarize(rates: Sequence[float | None]) -> Measured | None:
    """The median and spread of a setting's runs; ``None`` when any run failed (a setting that
    fails once is not a setting to write)."""
    if not rates or any(r is None or r <= 0 for r in rates):
        return None
    values = tuple(float(r) for r in rates)  # type: ignore[arg-type]
    median = statistics.median(values)
    return Measured(rates=values, median=median, spread=(max(values) - min(values)) / (2 * median))


def compare(a: Measured, b: Measured, tolerance: float) -> tuple[float, float]:
    """``(gain, noise)`` of ``a`` over ``b``: round by round when both ran the same rounds."""
    if len(a.rates) == len(b.rates) >= 2:
        ratios = summarize([x / y for x, y in zip(a.rates, b.rates)])
        if ratios is not None:
            return ratios.median, max(tolerance, ratios.spread)
    return a.median / b.median, max(tolerance, a.spread + b.spread)


def noise(a: Measured, b: Measured, tolerance: float) -> float:
    """The fraction a difference between ``a`` and ``b`` must exceed to be real."""
    return compare(a, b, tolerance)[1]


def beats(candidate: Measured | None, base: Measured | None, tolerance: float) -> bool:
    """``candidate`` is faster than ``base`` by more than the noise of the pair."""
    if candidate is None:
        return False
    if base is None:
        return True  # the starting setting failed: anything that ran is better
    gain, margin = compare(candidate, base, tolerance)
    return gain > 1.0 + margin


def pick(measured: Sequence[Measured | None], *, base: int, tolerance: float) -> tuple[int | None, str]:
    """The winning index among settings in cost order (cheapest first), and why.

    ``base`` is the starting setting. Only settings that beat it beyond the noise can win; among
    those, the cheapest one that the fastest does not beat beyond the noise wins (an extra
    worker, a riskier dtype or a compile is only chosen when it is really faster). ``None`` when
    nothing ran.
    """
    if not 0 <= tolerance < 1:
        raise ValueError(f"tolerance={tolerance} must be in [0, 1)")
    valid = [(i, m) for i, m in enumerate(measured) if m is not None]
    if not valid:
        return None, "no setting ran cleanly"
    start = measured[base] if 0 <= base < len(measured) else None
    better = [(i, m) for i, m in valid if i != base and beats(m, start, tolerance)]
    if not better:
        if start is None:
            return None, "the starting setting failed and nothing beat it"
        best_i, best = max(valid, key=lambda p: p[1].median)
        if best_i == base:
            return base, "the starting setting is the fastest"
        gain, margin = compare(best, start, tolerance)
        return base, f"{gain:.2f}x is inside the noise (+-{margin:.0%}): the starting setting stays"
    top_i, top = max(better, key=lambda p: p[1].median)
    for i, m in better:
        if not beats(top, m, tolerance):
            gain = (f"{compare(m, start, tolerance)[0]:.2f}x the starting setting (beyond the "
                    f"+-{noise(m, start, tolerance):.0%} noise)" if start else "the starting setting failed")
            return i, gain
    return top_i, "fastest"  # pragma: no cover - the top never beats itself


def too_noisy(noise: float) -> str:
    """What to do when ``noise`` (a comparison's band, a fraction) is too wide to decide in, in
    words; "" when it is not (at most :data:`NOISY`)."""
    if noise <= NOISY:
        return ""
    return (f"the machine was too noisy to confirm a gain (the tuned/starting ratio moved +-{noise:.0%} from round "
            "to round; an idle machine measures within a few percent): rerun when nothing else is using its CPUs "
            "and GPU, or with a longer --window-s so each run averages over more steps")


def rotated(arms: Sequence, round_: int) -> list:
    """``arms`` in the order of round ``round_``: each arm goes first once every len(arms) rounds."""
    k = round_ % len(arms)
    return [*arms[k:], *arms[:k]]
