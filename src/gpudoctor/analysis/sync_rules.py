"""Host-device synchronisation in the hot loop (``.item()``, ``.cpu()``, ``print(tensor)``...)."""

from __future__ import annotations

from gpudoctor.analysis.breakdown import host_active_ms
from gpudoctor.analysis.facts import RankFacts, RunFacts, main_loader
from gpudoctor.analysis.prescription import ms, pct, performance_finding, worst_rank
from gpudoctor.analysis.thresholds import Thresholds
from gpudoctor.records.finding import Finding, Severity

CODE_HOST_SYNC = "GD-RUN-HOST-SYNC"


def unexplained_idle(rf: RankFacts) -> float | None:
    """GPU idle share of the step not explained by waiting for data, copies or collectives.

    That is the idle time the host's own work causes: launching, Python, and - after a sync -
    the gap until the next kernels are queued: the ``host`` part of the breakdown
    (:mod:`gpudoctor.analysis.breakdown`) less its periodic stalls (GD-RUN-PERIODIC-STALL's). Without a GPU timeline, from NVML's utilisation.
    """
    b = rf.breakdown
    if b.gpu_timeline:
        return (b.host_ms - b.stall_host_ms) / b.step_ms if b.step_ms > 0 else 0.0
    busy = rf.busy_frac
    if busy is None:
        return None
    return max(0.0, (1.0 - busy) - rf.stats.data_wait_share - rf.stats.h2d_share)


def check_host_sync(facts: RunFacts, th: Thresholds) -> list[Finding]:
    """The loop synchronises with the GPU every step, so the host cannot queue work ahead.

    Expected gain = the GPU idle share not explained by data or copies: without the sync the host
    queues step n+1 while the GPU still runs step n, hiding that host time behind GPU work (an
    upper bound: it is reached when host time per step stays under GPU time per step).
    """
    if not facts.on_gpu or not facts.ranks:
        return []
    return worst_rank(facts.ranks, lambda rf: _host_sync(rf, th), lambda rf: rf.rank)


def _host_sync(rf: RankFacts, th: Thresholds) -> list[Finding]:
    # the probes do not count GradScaler.step()'s own found-inf read: it is required
    syncs = rf.stats.host_syncs
    if syncs < th.sync_min_per_step:
        return []
    idle = unexplained_idle(rf)
    if idle is None:
        return []
    cost = rf.sync_cost_share
    if cost is not None and cost < th.info_gain and idle >= th.idle_min_share:
        # the host's own work fills the step: without the syncs it could not run far enough
        # ahead to feed the GPU, so removing them frees little (GD-RUN-LAUNCH-BOUND or the
        # host's other work is the cause)
        return [_host_bound_syncs_note(rf, syncs, cost)]
    gpu_idle = 1.0 - rf.busy_frac if rf.busy_frac is not None else idle
    loader = main_loader(rf.config)
    loads_inline = loader is None or loader.num_workers == 0  # batches made on the training thread
    if idle < th.idle_min_share and (cost is None or gpu_idle < th.idle_min_share or cost < th.info_gain
                                     or not loads_inline):
        # the GPU stays fed despite the syncs (a GPU-bound host blocks in them while the GPU
        # runs queued work): reading a loss per step is then fine, and telling the user to
        # remove them would promise a gain the records do not show. A GPU that idles while
        # the host makes the next batch itself (no workers) is not fed: the sync stops that
        # work overlapping the GPU's, and the cost (min(W, step - busy)) says what it is worth;
        # with workers, batches are made meanwhile in other processes and the wait absorbs it.
        return [_cheap_syncs_note(rf, syncs, idle, th)]
    evidence = [
        f"{syncs:.0f} host-device syncs per step (median), rank {rf.rank}",
        f"GPU idle {pct(1.0 - (rf.busy_frac or 0.0))} of a {ms(rf.breakdown.step_ms)} mean step; "
        f"{pct(idle)} not explained by data wait, copies or collectives",
    ]
    if rf.window is not None and rf.window.sync_calls:
        evidence.append(f"profiler window: {rf.window.sync_calls} synchronising calls, "
                        f"{rf.window.sync_ms:.1f} ms blocked, over {rf.window_steps} steps")
    if rf.host_ops_line():
        evidence.append(rf.host_ops_line())
    if cost is not None:
        evidence.append(f"without them the host would queue the next step while the GPU works: "
                        f"at least {pct(cost)} of the step saved (host work ~{ms(host_active_ms(rf.stats, rf.window))}, "
                        f"GPU busy {ms(rf.breakdown.gpu_busy_ms)} per step), at most {pct(idle)}")
    return performance_finding(
        code=CODE_HOST_SYNC, gain=idle if cost is None else cost, thresholds=th,
        title=f"Host-sync bound: {syncs:.0f} sync(s) per step keep the GPU idle {pct(idle)} of it",
        evidence=evidence,
        fix=(
            "# every .item() / .cpu() / .tolist() / print(cuda_tensor) waits for the GPU\n"
            "running_loss += loss.detach()          # stays on the GPU, no sync\n"
            "if step % 100 == 0:                    # read it rarely (one sync per 100 steps)\n"
            "    print(f\"loss {running_loss.item() / 100:.4f}\")\n"
            "    running_loss.zero_()"
        ),
    )


def _host_bound_syncs_note(rf: RankFacts, syncs: float, cost: float) -> Finding:
    """INFO: the loop syncs every step, but the host's own work (Python, launches) already takes
    longer than the GPU's, so the host could not run ahead without the syncs either."""
    return Finding(
        code=CODE_HOST_SYNC, severity=Severity.INFO,
        title=f"{syncs:.0f} host sync(s) per step cost at most {pct(cost)} here: the host's own "
              "work is the bottleneck",
        evidence=(
            f"{syncs:.0f} host-device syncs per step (median), rank {rf.rank}",
            f"GPU busy {pct(rf.busy_frac)} of a {ms(rf.breakdown.step_ms)} mean step: the host launches "
            "work more slowly than the GPU runs it, syncs or not",
        ),
        fix=("# make the host's work per step smaller first (see the launch-bound finding);\n"
             "# then read metrics every N steps instead of every step"),
        expected_gain=None,
    )


def _cheap_syncs_note(rf: RankFacts, syncs: float, idle: float, th: Thresholds) -> Finding:
    """INFO, no expected gain: the loop syncs every step, but the GPU idles too little for it.

    The host then blocks in the sync while the GPU works (time it would otherwise spend waiting
    in a launch once the queue is full), so the syncs cost at most ``idle`` of the step. Worth
    knowing, because the same loop on a faster GPU or with less GPU work per step will pay it.
    """
    evidence = [
        f"{syncs:.0f} host-device syncs per step (median), rank {rf.rank}",
        f"GPU busy {pct(rf.busy_frac)} of a {ms(rf.breakdown.step_ms)} mean step; at most {pct(idle)} "
        f"idle that data wait or copies do not explain (it matters from "
        f"{pct(th.idle_min_share)})",
    ]
    if rf.window is not None and rf.window.sync_calls:
        evidence.append(f"profiler window: {rf.window.sync_ms:.1f} ms blocked in "
                        f"{rf.window.sync_calls} synchronising calls over {rf.window_steps} steps, "
                        "waiting for GPU work already queued")
    return Finding(
        code=CODE_HOST_SYNC, severity=Severity.INFO,
        title=f"{syncs:.0f} host sync(s) per step cost at most {pct(idle)} of it here: "
              "too little to act on",
        evidence=tuple(evidence),
        fix=(
            "# nothing to gain now; with less GPU work per step (smaller batch or model, a faster\n"
            "# GPU) each sync stalls the launch queue - then read metrics every N steps:\n"
            "running_loss += loss.detach()          # stays on the GPU, no sync\n"
            "if step % 100 == 0:\n"
            "    print(f\"loss {running_loss.item() / 100:.4f}\")\n"
            "    running_loss.zero_()"
        ),
        expected_gain=None,
    )


__all__ = ["CODE_HOST_SYNC", "check_host_sync", "unexplained_idle"]
