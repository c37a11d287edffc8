"""Periodic stalls: one step in N much slower than the rest, which a median hides.

A loader that stalls every N batches (workers restarted each epoch, a slow shard, a sample that
decodes slowly), a metric read or a checkpoint every N steps: the median step looks healthy, the
run is not. The rule judges the mean against the median (:class:`gpudoctor.analysis.steps.Tail`)
on every rank and names the worst.
"""

from __future__ import annotations

from gpudoctor.analysis.facts import RankFacts, RunFacts
from gpudoctor.analysis.prescription import ms, pct, performance_finding, worst_rank
from gpudoctor.analysis.thresholds import Thresholds
from gpudoctor.records.finding import Finding

CODE_STALL = "GD-RUN-PERIODIC-STALL"


def check_periodic_stalls(facts: RunFacts, th: Thresholds) -> list[Finding]:
    """Slow steps cost ``tail_min_excess`` of the run or more.

    Expected gain = the slow steps' time beyond the median step, as a share of the run's time:
    what the run saves if those steps took a typical step's time.
    """
    return worst_rank(facts.ranks, lambda rf: _stalls(rf, th), lambda rf: rf.rank)


def _cause(rf: RankFacts, th: Thresholds) -> tuple[str, str, str]:
    """(what, evidence, fix) for the slow steps of ``rf``: the loader, syncs, or other host work."""
    tail = rf.stats.tail
    assert tail is not None
    extra = tail.excess_ms / len(tail.slow_steps)
    if tail.extra_data_wait_ms >= 0.5 * extra:
        return (
            "waits for the DataLoader",
            f"in the slow steps the data wait is {ms(tail.extra_data_wait_ms)} above the median "
            f"{ms(rf.stats.data_wait_ms)}",
            "# the workers fall behind in bursts: restarts each epoch, a slow sample or shard\n"
            "loader = DataLoader(dataset, ..., persistent_workers=True,  # no restart each epoch\n"
            "                    prefetch_factor=4)                       # a deeper queue absorbs bursts\n"
            "# and make the slowest samples cheaper (decode, augmentation) - see gpudoctor tune loader",
        )
    if tail.extra_syncs >= th.sync_min_per_step:
        return (
            "synchronises with the GPU",
            f"the slow steps make {tail.extra_syncs:.1f} more host syncs than the median step",
            "# a metric read, print or check every N steps waits for all queued GPU work:\n"
            "# read accumulated GPU tensors less often, or asynchronously\n"
            "if step % log_every == 0:\n"
            "    log(running_loss.item() / log_every)",
        )
    return (
        "does extra host work",
        "neither the data wait nor the host syncs explain the slow steps",
        "# look at what the script does every N steps: evaluation, checkpointing, logging,\n"
        "# garbage collection (gc.freeze() after start-up), or another process on the machine\n"
        "# (gpudoctor monitor)",
    )


def _stalls(rf: RankFacts, th: Thresholds) -> list[Finding]:
    tail = rf.stats.tail
    if tail is None or len(tail.slow_steps) < 2 or tail.excess_share < th.tail_min_excess:
        return []
    if len(tail.slow_steps) > th.tail_max_slow_frac * rf.stats.n_used:
        return []  # bimodal step times, not stalls (Thresholds.tail_max_slow_frac)
    idle = 1.0 - rf.busy_frac if rf.busy_frac is not None else None
    if idle is not None and idle < th.tail_min_excess:
        return []  # the GPU stayed busy through the slow host steps: queued work hid them
    what, cause_line, fix = _cause(rf, th)
    if not tail.regular and what == "does extra host work":
        return []  # scattered slow steps with no cause in the records: scheduling noise
    every = f"every ~{tail.period:.0f} steps" if tail.period and tail.regular else "repeatedly"
    evidence = [
        f"{len(tail.slow_steps)} of {rf.stats.n_used} steady steps took over "
        f"{th.tail_slow_factor:g}x the median {ms(rf.stats.step_ms)} ({every}; steps "
        f"{', '.join(map(str, tail.slow_steps[:6]))}{', ...' if len(tail.slow_steps) > 6 else ''}), "
        f"rank {rf.rank}",
        f"mean step {ms(rf.stats.mean_step_ms)} against a median of {ms(rf.stats.step_ms)}; "
        f"90th percentile {ms(tail.p90_step_ms)}",
        cause_line,
    ]
    return performance_finding(
        code=CODE_STALL, gain=tail.excess_share, thresholds=th,
        title=f"Periodic stalls: {every} a step {what}; the slow steps cost "
              f"{pct(tail.excess_share)} of the run",
        evidence=evidence, fix=fix,
    )


__all__ = ["CODE_STALL", "check_periodic_stalls"]
