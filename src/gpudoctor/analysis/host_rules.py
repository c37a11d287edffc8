"""Host work by named operation: ``torch.save``, ``torch.load`` and garbage collection on the
training thread, from their measured time (:mod:`gpudoctor.analysis.host_work`).

Judged on the operation's own time, not on how many steps were slow: two checkpoints in a
60-step window are too few to show a period, but their time is measured, and what removing
them saves is that time beyond a typical step (capped by the GPU's timeline where it is known).
Work done in every step counts too (a collector that scans a large heap each step), capped by
the GPU's idle share: on a GPU-bound run the host's time is hidden behind queued work.

A checkpoint at every epoch boundary is left to the periodic-stall finding, which names it
among the boundary's parts (``GD-RUN-PERIODIC-STALL``).
"""

from __future__ import annotations

import statistics

from gpudoctor.analysis.facts import RankFacts, RunFacts
from gpudoctor.analysis.host_fixes import dur, op_fix
from gpudoctor.analysis.host_work import HostOpCost
from gpudoctor.analysis.prescription import ms, pct, performance_finding, worst_rank
from gpudoctor.analysis.step_tail import episode_starts
from gpudoctor.analysis.tail_rules import at_epoch_boundaries
from gpudoctor.analysis.thresholds import Thresholds
from gpudoctor.records.finding import Finding
from gpudoctor.records.step import OP_GC, OP_LOAD, OP_SAVE
from gpudoctor.records.units import human_bytes

CODE_SAVE = "GD-RUN-HOST-SAVE"
CODE_LOAD = "GD-RUN-HOST-LOAD"
CODE_GC = "GD-RUN-HOST-GC"
CODES = {OP_SAVE: CODE_SAVE, OP_LOAD: CODE_LOAD, OP_GC: CODE_GC}
NAMES = {OP_SAVE: "torch.save", OP_LOAD: "torch.load", OP_GC: "garbage collection"}


def check_host_ops(facts: RunFacts, th: Thresholds) -> list[Finding]:
    """One finding per named operation that costs ``info_gain`` of the run or more, worst rank.

    Expected gain = its time beyond a typical step in the steps it made slow, plus its time in
    every step (up to the GPU's idle time per step), over the steady steps' time.
    """
    out: list[Finding] = []
    for op in CODES:
        out.extend(worst_rank(facts.ranks, lambda rf, op=op: _finding(rf, op, th, facts.world_size),
                              lambda rf: rf.rank))
    return out


def _every(steps: tuple[int, ...], th: Thresholds) -> str:
    """``every ~20 steps`` when the steps recur at about one distance, else ``in N steps``."""
    starts = episode_starts([_Step(s) for s in steps])
    gaps = [b - a for a, b in zip(starts, starts[1:])]
    if gaps and statistics.pstdev(gaps) <= th.tail_regular_cv * statistics.fmean(gaps):
        return f"every ~{statistics.median(gaps):.0f} steps"
    if len(steps) == 1:
        return f"at step {steps[0]}"
    return f"in {len(steps)} steps"


class _Step:  # episode_starts reads .step only
    __slots__ = ("step",)

    def __init__(self, step: int) -> None:
        self.step = step


def _steady_saving_ms(rf: RankFacts, typical: float) -> float:
    """What the operation's time in every step would save per step: all of it while the host is
    the bottleneck, at most the GPU's idle time per step when the GPU timeline is known."""
    busy = rf.busy_frac
    if busy is None or not rf.breakdown.gpu_timeline:
        return typical
    return min(typical, max(0.0, (1.0 - min(1.0, busy)) * rf.breakdown.step_ms))


def _finding(rf: RankFacts, op: str, th: Thresholds, world: int) -> list[Finding]:
    cost = rf.stats.host_work.op(op)
    if cost is None or rf.stats.total_ms <= 0:
        return []
    tail = rf.stats.tail
    if (cost.spike_steps and tail is not None and tail.stalls and at_epoch_boundaries(rf, world)
            and set(cost.spike_steps) <= set(tail.slow_steps)):
        return []  # an epoch boundary's work: GD-RUN-PERIODIC-STALL names it among its parts
    steady = _steady_saving_ms(rf, cost.typical_ms) * cost.n_steps
    gain = round(min(1.0, (cost.spike_cost_ms + steady) / rf.stats.total_ms), 4)
    spiky = bool(cost.spike_steps) and cost.spike_cost_ms >= steady
    name = NAMES[op]
    where = f" from {cost.site}" if cost.site else ""
    if spiky:
        each = statistics.median(cost.spike_ms)
        every = _every(cost.spike_steps, th)
        title = (f"Host work: {every} a step spends {dur(each)} in {name}{where}: "
                 f"{pct(gain)} of the run")
    else:
        every = "every step"
        title = f"Host work: {name} takes {dur(cost.typical_ms)} of every step{where}: {pct(gain)} of the run"
    evidence = _evidence(rf, cost, name, spiky, steady, gain)
    return performance_finding(code=CODES[op], gain=gain, thresholds=th, title=title, evidence=evidence,
                               fix=op_fix(op, every),
                               data=(("op_ms", round(cost.total_ms, 2)), ("spike_cost_ms", round(cost.spike_cost_ms, 2)),
                                     ("steady_ms", round(steady, 2)), ("calls", float(cost.calls)),
                                     ("bytes", float(cost.bytes))))


def _evidence(rf: RankFacts, cost: HostOpCost, name: str, spiky: bool, steady: float, gain: float) -> list[str]:
    s = rf.stats
    lines = []
    if spiky:
        shown = ", ".join(map(str, cost.spike_steps[:6])) + (", ..." if len(cost.spike_steps) > 6 else "")
        lines.append(f"{len(cost.spike_steps)} of {s.n_used} steady steps spent {dur(statistics.median(cost.spike_ms))} "
                     f"in {name} beyond a typical step (steps {shown}), rank {rf.rank}; median step {ms(s.step_ms)}")
    else:
        lines.append(f"{name} took {ms(cost.typical_ms)} in a typical step (median) of {ms(s.step_ms)}, "
                     f"rank {rf.rank}")
    if cost.op == OP_GC:
        lines.append(f"{cost.calls} collections in {s.n_used} steady steps, {cost.gen2} of them full "
                     "(generation 2: they walk every tracked object)")
    elif cost.calls:
        size = cost.bytes / cost.calls
        rate = f", {human_bytes(cost.bytes / (cost.total_ms / 1000.0))}/s" if cost.bytes and cost.total_ms > 0 else ""
        lines.append(f"{cost.calls} call(s) of {name}, {human_bytes(size)} each{rate}"
                     + (f", called from {cost.site}" if cost.site else ""))
    frames = [f for f in s.host_work.frames if f.op == cost.op]
    if frames:
        top = frames[0]
        chain = " < ".join((top.site, *top.callers))
        lines.append(f"sampled while in {name}: {chain}")
    saved = cost.spike_cost_ms + steady
    lines.append(f"without it the steady steps would take {ms(saved)} less of their {ms(s.total_ms)}: "
                 f"{pct(gain)} of the run")
    if spiky and cost.spike_cost_ms + 1e-6 < sum(cost.spike_ms):
        lines.append(f"of its {ms(sum(cost.spike_ms))} in the slow steps, {ms(cost.spike_cost_ms)} lengthened "
                     "the step (the GPU's timeline or the step's own time); queued work hid the rest")
    return lines


__all__ = ["CODES", "CODE_GC", "CODE_LOAD", "CODE_SAVE", "check_host_ops"]
