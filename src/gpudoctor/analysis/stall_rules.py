"""A run that stopped making progress: stalled, stuck before its first step, or interrupted.

Compile time is not a stall (the supervisor leaves it out of the stall limits): a run stopped by
``--compile-timeout`` is *stuck compiling*, one interrupted while compiling says so, and a stall's
evidence says how much of the wait was compilation.

Rank policy: every rank with stacks is named. Under several ranks the one that stalled is the
one *not* waiting in a collective (else the one with the fewest steps); the others are named as
waiting for it in the collective their stack shows.
"""

from __future__ import annotations

from gpudoctor.analysis.stacks import RankStack, main_thread
from gpudoctor.analysis.thresholds import Thresholds
from gpudoctor.records.finding import Finding, Severity
from gpudoctor.records.rundir import RunData

CODE_STALL = "GD-RUN-STALL"
CODE_INTERRUPTED = "GD-RUN-INTERRUPTED"
_USER_FRAMES = 3  # innermost frames of the user's code quoted per rank


def check_stall(run: RunData, th: Thresholds) -> list[Finding]:
    """The stall (or the first-step timeout, or Ctrl-C) with where each rank's main thread was."""
    m = run.manifest
    if m.status not in ("stalled", "timeout", "interrupted"):
        return []
    steps = {r: len(s) for r, s in run.steps.items()}
    stacks = {r: st for r, text in sorted(run.stacks.items()) if (st := main_thread(text)) is not None}
    ddp = {r for r, c in run.configs.items() if c.ddp is not None}
    stuck = _stalled_ranks(stacks, steps, ddp)
    evidence = [_rank_line(r, stacks.get(r), steps.get(r), r in stuck, r in ddp) for r in sorted(set(stacks) | set(steps))]
    evidence = [line for line in evidence if line]
    at = min(steps.values(), default=0)
    where = _where(stuck, stacks)
    idle = f"{m.idle_s:.0f} s" if m.idle_s is not None else "a long time"
    limit = f" (limit {m.stall_limit_s:g} s)" if m.stall_limit_s else ""
    fix = _fix(stuck, stacks)
    compiled = m.compile_s or 0.0
    if compiled >= 1.0:
        evidence.append(f"{compiled:.0f} s of the {idle} without a step went to compiling (torch.compile)"
                        + ("; it was compiling when stopped" if m.compiling else "")
                        + ("" if m.compile_limit_s else ", which the stall limit does not count"))
    if m.compile_limit_s and m.status in ("stalled", "timeout"):
        when = f"at step {at}" if m.status == "stalled" else "before the first optimizer step"
        title = (f"Stuck compiling {when}: torch.compile compiled for {compiled:.0f} s without an "
                 f"optimizer step (--compile-timeout {m.compile_limit_s:g} s){where}")
        fix = ("TORCH_LOGS=recompiles,graph_breaks python train.py   # what it compiles, and how often\n"
               f"gpudoctor run --compile-timeout {2 * m.compile_limit_s:g} -- python train.py   "
               "# if compiling it really takes that long\n" + fix)
        return [Finding(code=CODE_STALL, severity=Severity.ERROR, title=title,
                        evidence=tuple(evidence) or ("no stacks were captured",), fix=fix)]
    if m.status == "stalled":
        title = f"Stalled at step {at}: no optimizer step for {idle}{limit}{where}"
        return [Finding(code=CODE_STALL, severity=Severity.ERROR, title=title,
                        evidence=tuple(evidence) or ("no stacks were captured",), fix=fix)]
    if m.status == "timeout":
        if not stacks:
            return []
        title = f"Stuck before the first optimizer step: none in {idle}{limit}{where}"
        return [Finding(code=CODE_STALL, severity=Severity.ERROR, title=title, evidence=tuple(evidence), fix=fix)]
    # interrupted: stuck when it had gone without a step far longer than its steps take (compile
    # time left out: compiling is progress)
    stalled = bool(steps) and m.idle_s is not None and m.idle_s - compiled > max(
        th.stuck_min_idle_s, (m.stall_limit_s or 0.0) / 4)
    if m.compiling and not stalled:
        title = (f"Interrupted (Ctrl-C) at step {at} while compiling (torch.compile, {compiled:.0f} s "
                 "since the last step): the diagnosis covers only the steps before it")
        return [Finding(code=CODE_INTERRUPTED, severity=Severity.WARN, title=title, evidence=tuple(evidence),
                        fix="gpudoctor run --steps N -- ...   # let it stop by itself after N steps")]
    if stalled:
        title = f"Interrupted at step {at} after {idle} without an optimizer step: it was stuck{where}"
        return [Finding(code=CODE_STALL, severity=Severity.ERROR, title=title,
                        evidence=tuple(evidence) or ("no stacks were captured",), fix=fix)]
    title = f"Interrupted (Ctrl-C) at step {at}: the diagnosis covers only the steps before it"
    return [Finding(code=CODE_INTERRUPTED, severity=Severity.WARN, title=title, evidence=tuple(evidence),
                    fix="gpudoctor run --steps N -- ...   # let it stop by itself after N steps")]


def _stalled_ranks(stacks: dict[int, RankStack], steps: dict[int, int], ddp: set[int]) -> set[int]:
    """Ranks not waiting for another: not in a collective; else the fewest steps."""
    if len(stacks) <= 1 and len(steps) <= 1:
        return set(stacks) | set(steps)
    waiting = {r for r, st in stacks.items() if st.collective is not None or (r in ddp and st.in_backward)}
    free = set(stacks) - waiting
    if free and waiting:
        return free
    fewest = min(steps.values(), default=0)
    behind = {r for r, n in steps.items() if n == fewest}
    return behind if len(behind) < len(steps) else free or set(stacks)


def _rank_line(rank: int, st: RankStack | None, done: int | None, stuck: bool, ddp: bool) -> str:
    count = f"{done} steps" if done is not None else "no steps"
    if st is None:
        return f"rank {rank} ({count}): no stack captured"
    user = st.user_frames[:_USER_FRAMES]
    at = "; ".join(f.short for f in user) if user else (st.frames[0].short if st.frames else "no Python frame")
    coll = st.collective
    if coll is not None:
        return f"rank {rank} ({count}): waiting in {coll.function} ({coll.short}), called from {at}"
    if ddp and st.in_backward:
        return f"rank {rank} ({count}): in backward(), where DDP waits for the gradient all-reduce; at {at}"
    role = "stalled here" if stuck else "at"
    return f"rank {rank} ({count}): {role} {at}"


def _where(stuck: set[int], stacks: dict[int, RankStack]) -> str:
    for r in sorted(stuck):
        st = stacks.get(r)
        if st is None:
            continue
        frame = (st.user_frames or st.frames or (None,))[0]
        if frame is None:
            continue
        others = sorted(set(stacks) - stuck)
        tail = f"; rank {', '.join(map(str, others))} waited for it" if others else ""
        who = f"rank {r} " if len(stacks) > 1 else ""
        return f"; {who}stuck at {frame.short}{tail}"
    return ""


def _fix(stuck: set[int], stacks: dict[int, RankStack]) -> str:
    rank = min(stuck & set(stacks), default=min(stacks, default=0))
    lines = [f"less RUNDIR/stacks-rank{rank}.txt   # every thread's Python stack when it was stopped"]
    if len(stacks) > 1:
        lines.append("# a collective no other rank reaches waits forever: give init_process_group(timeout=...) "
                     "so it fails with an error instead")
    return "\n".join(lines)


__all__ = ["CODE_INTERRUPTED", "CODE_STALL", "check_stall"]
