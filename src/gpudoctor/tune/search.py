"""Search strategies, pure: they call the objective they are given and never touch a GPU.

* :func:`grow_then_bisect` finds the largest size for which ``fits(size)`` holds (the OOM
  boundary): double until a size fails or the cap is reached, then narrow the bracket between the
  last size that fit and the first that failed to ``resolution``, then step back by a safety
  margin. Every probe is a real trial, so a boundary that is not monotone (cuDNN workspaces,
  fragmentation) is still bracketed. Given a ``predict`` (where the boundary probably is, e.g.
  from :func:`linear_limit`), the bracket is narrowed around the prediction first: two probes
  when it is right, about twice the bisection's probes in the worst case.
* :func:`linear_limit` predicts the boundary from measured peak memory (memory grows linearly
  with the batch: activations).
* :func:`grid` lists every combination of a few axes, cheapest first.
* :func:`pick_cheapest` chooses among measured settings without chasing noise: the first (cheapest)
  setting whose throughput is within ``tolerance`` of the best one.
* :func:`knee` says where a throughput curve flattens.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from gpudoctor.analysis.memory_model import fit_affine, max_batch_that_fits


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Probe:
    """One call of the objective: ``size`` and whether it fit."""

    size: int
    fits: bool


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class BoundarySearch:
    """What :func:`grow_then_bisect` found.

    Attributes:
        largest_fit: the largest size that fit (``None``: not even ``start`` fit).
        smallest_fail: the smallest size that failed (``None``: the cap was reached first).
        chosen: ``largest_fit`` minus the margin (the cap itself when the cap was reached).
        probes: every probe, in order.
        capped: the cap, not memory, ended the growth.
        stopped: ``enough()`` ended the growth (e.g. the throughput stopped rising): the limit
            was not searched.
    """

    largest_fit: int | None
    smallest_fail: int | None
    chosen: int | None
    probes: tuple[Probe, ...]
    capped: bool
    stopped: bool = False


def grow_then_bisect(fits: Callable[[int], bool], *, start: int = 1, cap: int, margin: float = 0.05,
                     factor: float = 2.0, resolution: float = 0.01, max_probes: int = 40,
                     predict: Callable[[int, int], int | None] | None = None,
                     enough: Callable[[], bool] | None = None) -> BoundarySearch:
    """Find the largest ``size`` in ``[start, cap]`` with ``fits(size)`` true.

    Args:
        fits: the objective (a real trial: does a training step at this size succeed?).
        start: the first size tried.
        cap: never try more than this (dataset size, host RAM, a user maximum).
        margin: the chosen size is ``floor(largest_fit * (1 - margin))``: headroom for the
            fragmentation a long run builds up (Lightning #8028 found sizes that later OOMed).
        factor: growth factor while everything fits.
        resolution: stop narrowing when the bracket is narrower than this fraction of the size.
        max_probes: a hard limit on calls of ``fits``.
        predict: ``predict(lo, hi)`` -> the size the boundary is probably at (the largest that
            fits), or ``None``; called once, when the first failure has bracketed the boundary.
            A wrong prediction costs probes, never correctness: every answer is a probed size.
        enough: called after each size that fit while growing; ``True`` stops the growth there
            (no margin: the size was not near the memory limit).

    Raises:
        ValueError: a bad argument, with what to pass instead.
    """
    if start < 1 or cap < start:
        raise ValueError(f"need 1 <= start <= cap, got start={start}, cap={cap}")
    if not 0 <= margin < 1:
        raise ValueError(f"margin={margin} must be in [0, 1); e.g. 0.05 keeps 5% headroom")
    if factor <= 1:
        raise ValueError(f"factor={factor} must be > 1 (the growth factor, e.g. 2)")
    probes: list[Probe] = []

    def probe(size: int) -> bool:
        ok = bool(fits(size))
        probes.append(Probe(size=size, fits=ok))
        return ok

    lo: int | None = None
    hi: int | None = None
    size = start
    while len(probes) < max_probes:
        if probe(size):
            lo = size
            if size >= cap:
                break
            if enough is not None and enough():
                return BoundarySearch(largest_fit=lo, smallest_fail=None, chosen=lo, probes=tuple(probes),
                                      capped=False, stopped=True)
            size = min(cap, max(size + 1, int(size * factor)))
        else:
            hi = size
            break
    if lo is None:
        return BoundarySearch(largest_fit=None, smallest_fail=hi, chosen=None, probes=tuple(probes), capped=False)
    if hi is None:
        capped = lo >= cap
        return BoundarySearch(largest_fit=lo, smallest_fail=None, chosen=lo if capped else _with_margin(lo, margin),
                              probes=tuple(probes), capped=capped)
    guess = predict(lo, hi) if predict is not None else None
    lo, hi = narrow(probe, lo, hi, resolution=resolution, max_probes=max_probes - len(probes), guess=guess)
    return BoundarySearch(largest_fit=lo, smallest_fail=hi, chosen=_with_margin(lo, margin),
                          probes=tuple(probes), capped=False)


def _width(size: int, resolution: float) -> int:
    return max(1, math.floor(size * resolution))


def narrow(fits: Callable[[int], bool], lo: int, hi: int, *, resolution: float = 0.01, max_probes: int = 40,
           guess: int | None = None) -> tuple[int, int]:
    """Narrow a bracket (``lo`` fits, ``hi`` does not) until ``hi - lo <= max(1, lo * resolution)``.

    Without a ``guess``: bisection. With one (the size the boundary is probably at): probe just
    below it, then one bracket width above (or below) that: a right guess closes the bracket in
    two probes. When the guess was off, gallop away from it with doubling steps until the boundary
    is crossed, then bisect what is left. Returns the final ``(lo, hi)``; ``max_probes`` bounds the
    calls of ``fits``.
    """
    if not 0 < lo < hi:
        raise ValueError(f"need 0 < lo < hi, got lo={lo}, hi={hi}")
    calls = 0

    def probe(size: int) -> bool:
        nonlocal calls
        calls += 1
        return fits(size)

    if guess is not None and lo < guess < hi and hi - lo > _width(lo, resolution):
        first = min(hi - 1, max(lo + 1, guess - _width(guess, resolution) // 2))
        up = probe(first)
        if up:
            lo = first
        else:
            hi = first
        step = _width(first, resolution)
        while hi - lo > _width(lo, resolution) and calls < max_probes:
            nxt = lo + step if up else hi - step
            if not lo < nxt < hi:
                break  # the step left the bracket: bisect the rest
            if probe(nxt):
                lo = nxt
                if not up:
                    break  # crossed going down: the boundary is in (nxt, previous hi)
            else:
                hi = nxt
                if up:
                    break  # crossed going up
            step *= 2
    while hi - lo > _width(lo, resolution) and calls < max_probes:
        mid = (lo + hi) // 2
        if probe(mid):
            lo = mid
        else:
            hi = mid
    return lo, hi


def linear_limit(points: Sequence[tuple[int, float]], capacity: float) -> int | None:
    """The largest size whose memory stays under ``capacity``, from measured ``(size, bytes)``
    points: the memory model's line (:mod:`gpudoctor.analysis.memory_model`) through the largest
    size and the largest one at most 3/4 of it (the fixed part of the memory, weights and
    workspaces, drops out of the slope; points too close together would amplify noise). ``None``
    when the points cannot say (fewer than two usable, memory not growing with the size, or
    already over ``capacity``).
    """
    usable = sorted({s: m for s, m in points if s > 0 and m is not None and m > 0}.items())
    if len(usable) < 2 or capacity <= 0:
        return None
    s2, m2 = usable[-1]
    below = [(s, m) for s, m in usable if s <= 0.75 * s2]
    if not below:
        return None
    s1, m1 = below[-1]
    if m2 >= capacity:
        return None
    fixed, per_sample = fit_affine([(s1, m1), (s2, m2)])
    return max_batch_that_fits(fixed, per_sample, capacity, margin=0.0)


def _with_margin(size: int, margin: float) -> int:
    return max(1, math.floor(size * (1.0 - margin)))


def grid(axes: Mapping[str, Sequence[Any]]) -> list[dict[str, Any]]:
    """Every combination of ``axes`` (``{"num_workers": [0, 2], "pin_memory": [False, True]}``),
    in the order the values are listed: list the cheapest value of each axis first."""
    names = list(axes)
    return [dict(zip(names, values)) for values in itertools.product(*(axes[n] for n in names))]


def pick_cheapest(throughputs: Sequence[float | None], *, tolerance: float = 0.03) -> int | None:
    """The index of the first (cheapest) setting within ``tolerance`` of the best throughput.

    ``throughputs`` are in cost order (cheapest first); ``None`` marks a setting that failed or was
    rejected. Differences inside the tolerance are treated as measurement noise, so an extra
    worker process or a riskier precision is only chosen when it is really faster.
    """
    if not 0 <= tolerance < 1:
        raise ValueError(f"tolerance={tolerance} must be in [0, 1)")
    valid = [t for t in throughputs if t is not None and t > 0]
    if not valid:
        return None
    best = max(valid)
    for i, t in enumerate(throughputs):
        if t is not None and t >= best * (1.0 - tolerance):
            return i
    return None  # pragma: no cover - the best itself always qualifies


def knee(points: Sequence[tuple[int, float]], *, tolerance: float = 0.05) -> int | None:
    """The smallest size whose throughput is within ``tolerance`` of the best one: where the
    throughput-per-batch curve flattens (larger batches beyond it buy little speed)."""
    valid = sorted((s, t) for s, t in points if t is not None and t > 0)
    if not valid:
        return None
    best = max(t for _, t in valid)
    return next(s for s, t in valid if t >= best * (1.0 - tolerance))
