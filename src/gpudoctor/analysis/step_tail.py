"""The slow steps a median hides: stalls every N steps (a checkpoint, an epoch boundary, a
loader that falls behind), told from jitter and from the two modes of a step.

Part of the step statistics (:mod:`gpudoctor.analysis.steps` builds every rank's
:class:`~gpudoctor.analysis.steps.RankStepStats` with its :class:`Tail`); its limits are in
:class:`~gpudoctor.analysis.thresholds.Thresholds` (``tail_*``).
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass

from gpudoctor.analysis.thresholds import Thresholds
from gpudoctor.records.step import StepRecord


@dataclass(frozen=True, slots=True)
class Tail:
    """Steps much slower than the typical one, which a median hides (one step in N that waits).

    Attributes:
        slow_steps: indices of the stalled steps: of the steady steps longer than
            ``tail_slow_factor`` x the median, the fewest that carry ``tail_excess_cover`` of
            their time beyond the median (the long steps, not the jitter beside them).
        excess_ms: their time beyond the median step, summed.
        excess_share: ``excess_ms`` over the total time of the steady steps: what the run loses.
        period: median distance between the starts of consecutive stalls (slow steps at most
            1 apart are one stall: an epoch's end and the next one's first batch); ``None`` with
            fewer than two stalls.
        regular: three or more stalls whose distances vary by at most ``tail_regular_cv`` of
            their mean (a stall every N steps), not scattered as scheduling noise on a busy host is.
        extra_data_wait_ms: mean data wait of the slow steps minus the median data wait.
        extra_syncs: mean host syncs of the slow steps minus the median count.
        extra_sync_ms: mean host time blocked in syncs of the slow steps minus the median
            (0.0 in recordings without ``sync_ms``).
        p90_step_ms: 90th percentile of the steady steps' time.
        episodes: how many stalls (runs of slow steps) there were.
        stalls: the slow steps are stalls, not the jitter or the two modes of a step: at least
            two, at most ``tail_max_slow_frac`` of the steady steps, costing at least
            ``tail_min_excess`` of the run (the periodic-stall rule and the breakdown use it).
    """

    slow_steps: tuple[int, ...]
    excess_ms: float
    excess_share: float
    period: float | None
    regular: bool
    extra_data_wait_ms: float
    extra_syncs: float
    p90_step_ms: float
    episodes: int = 0
    stalls: bool = False
    extra_sync_ms: float = 0.0


def stall_steps(slow: Sequence[StepRecord], step_ms: float, cover: float, equal: float) -> list[StepRecord]:
    """The fewest slow steps that carry ``cover`` of the slow steps' excess, in step order,
    and the steps after those whose excess is ``equal`` of the shortest one's or more (stalls of
    equal length).

    A run whose epochs end with a 1.2 s checkpoint also has steps at 2x the median from loader
    jitter; the stall is the few long steps that hold the time, not every step over the factor.
    """
    total = sum(s.step_ms - step_ms for s in slow)
    kept: list[StepRecord] = []
    carried = 0.0
    for s in sorted(slow, key=lambda r: r.step_ms, reverse=True):
        # past the cover, steps about as long as the shortest stall are stalls too (equal stalls)
        if carried >= cover * total and s.step_ms - step_ms < equal * (kept[-1].step_ms - step_ms):
            break
        kept.append(s)
        carried += s.step_ms - step_ms
    return sorted(kept, key=lambda r: r.step)


def episode_starts(stalls: Sequence[StepRecord]) -> list[int]:
    """First step of each run of stalled steps (consecutive steps are one stall)."""
    starts: list[int] = []
    last: int | None = None
    for s in stalls:
        if last is None or s.step - last > 1:
            starts.append(s.step)
        last = s.step
    return starts


def _extra_sync_ms(used: Sequence[StepRecord], slow: Sequence[StepRecord]) -> float:
    """Mean ``sync_ms`` of the slow steps minus the median of all (0.0 when not recorded)."""
    known = [s.sync_ms for s in used if s.sync_ms is not None]
    slow_known = [s.sync_ms for s in slow if s.sync_ms is not None]
    if not slow_known or len(known) * 2 < len(used):
        return 0.0
    return sum(slow_known) / len(slow_known) - float(statistics.median(known))


def step_tail(used: Sequence[StepRecord], step_ms: float, wait_ms: float, syncs: float,
              thresholds: Thresholds) -> Tail:
    """The slow steps of the steady steps ``used`` against their median ``step_ms`` (and the
    median data wait and host syncs, to say what the slow steps add)."""
    times = [s.step_ms for s in used]
    # a step that compiled is slow for a known reason (GD-RUN-RECOMPILE), not a stall
    slow = [s for s in used if step_ms > 0 and s.step_ms > thresholds.tail_slow_factor * step_ms
            and not s.compiles]
    slow = stall_steps(slow, step_ms, thresholds.tail_excess_cover, thresholds.tail_stall_equal_frac)
    excess = sum(s.step_ms - step_ms for s in slow)
    total = sum(times)
    starts = episode_starts(slow)
    gaps = [b - a for a, b in zip(starts, starts[1:])]
    p90 = statistics.quantiles(times, n=10, method="inclusive")[-1] if len(times) > 1 else times[0]
    return Tail(
        slow_steps=tuple(s.step for s in slow),
        excess_ms=excess,
        excess_share=excess / total if total > 0 else 0.0,
        period=float(statistics.median(gaps)) if gaps else None,
        regular=len(gaps) >= 2 and statistics.pstdev(gaps) <= thresholds.tail_regular_cv * statistics.fmean(gaps),
        extra_data_wait_ms=(sum(s.data_wait_ms for s in slow) / len(slow) - wait_ms) if slow else 0.0,
        extra_syncs=(sum(s.host_syncs for s in slow) / len(slow) - syncs) if slow else 0.0,
        p90_step_ms=p90,
        episodes=len(starts),
        extra_sync_ms=_extra_sync_ms(used, slow),
        stalls=(thresholds.tail_min_slow_steps <= len(slow) <= thresholds.tail_max_slow_frac * len(used)
                and total > 0 and excess / total >= thresholds.tail_min_excess),
    )


__all__ = ["Tail", "episode_starts", "stall_steps", "step_tail"]
