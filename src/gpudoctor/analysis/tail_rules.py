"""Periodic stalls: one step in N much slower than the rest, which a median hides.

A loader that stalls every N batches (workers restarted each epoch, a slow shard, a sample that
decodes slowly), a metric read or a checkpoint every N steps: the median step looks healthy, the
run is not. The rule judges the mean against the median (:class:`gpudoctor.analysis.steps.Tail`)
on every rank and names the worst. What the host did in the slow steps comes from the records:
the data wait, the host syncs, the named operations (``torch.save``, collections: slow steps
they explain are left to ``GD-RUN-HOST-*``, :mod:`gpudoctor.analysis.host_rules`, which judges
them on their measured time), and the script's function the stack sampler found the training
thread in (``spends 352 ms in evaluate (train.py:12)``, with the fix for its kind of work).

A stall at every epoch boundary carries its parts as ``Finding.data`` (what ``gpudoctor fix``
plans from), each per boundary: ``epoch_steps`` (steps per epoch), ``boundary_ms`` (the
boundary's time beyond the median step), ``first_batch_wait_ms`` (of it, the wait for the first
batch), ``worker_restart`` (1.0 when that wait is the DataLoader's workers restarting:
``num_workers > 0`` and ``persistent_workers=False``; else 0.0), ``sync_ms`` and ``host_syncs``
(the extra host syncs), ``host_work_ms`` (the rest of the host work), and ``epoch_work_ms`` (the
script's own per-epoch work, syncs and host work, present only when the fix prescribes moving it).
"""

from __future__ import annotations

import math

from gpudoctor.analysis.facts import RankFacts, RunFacts, main_loader
from gpudoctor.analysis.host_fixes import dur, frame_fix, kind_of
from gpudoctor.analysis.prescription import ms, pct, performance_finding, worst_rank
from gpudoctor.analysis.thresholds import Thresholds
from gpudoctor.records.finding import Finding

CODE_STALL = "GD-RUN-PERIODIC-STALL"


def check_periodic_stalls(facts: RunFacts, th: Thresholds) -> list[Finding]:
    """Slow steps cost ``tail_min_excess`` of the run or more.

    Expected gain = the slow steps' time beyond the median step, as a share of the run's time:
    what the run saves if those steps took a typical step's time.
    """
    return worst_rank(facts.ranks, lambda rf: _stalls(rf, th, facts.world_size), lambda rf: rf.rank)


def _epoch_steps(rf: RankFacts, world: int) -> int | None:
    """Optimizer steps per epoch of the loader the loop iterates, when its length is known."""
    loader = main_loader(rf.config)
    if loader is None or not loader.dataset_len or not loader.batch_size:
        return None
    per_rank = loader.dataset_len / max(1, world) if loader.sampler == "DistributedSampler" else loader.dataset_len
    steps = per_rank / loader.batch_size
    return int(steps) if loader.drop_last else math.ceil(steps)


def at_epoch_boundaries(rf: RankFacts, world: int) -> bool:
    """The slow steps of ``rf`` come once per epoch of the loader the loop iterates."""
    tail = rf.stats.tail
    epoch = _epoch_steps(rf, world)
    return bool(tail is not None and epoch and tail.period and abs(tail.period - epoch) <= 1)


def named_share(rf: RankFacts) -> float:
    """The share of the slow steps' time beyond the median that named host operations
    (``torch.save``, a full collection) took beyond a typical step."""
    tail = rf.stats.tail
    if tail is None or tail.excess_ms <= 0:
        return 0.0
    slow = set(tail.slow_steps)
    named = sum(b for o in rf.stats.host_work.ops for s, b in zip(o.spike_steps, o.spike_ms) if s in slow)
    return named / tail.excess_ms


def _named_line(rf: RankFacts) -> str | None:
    """``of it, 1.2 s in torch.save from save (train.py:88)``: the named operations of the slow
    steps, per stall, or ``None``."""
    tail = rf.stats.tail
    assert tail is not None
    slow = set(tail.slow_steps)
    parts = []
    for o in rf.stats.host_work.ops:
        inside = sum(b for s, b in zip(o.spike_steps, o.spike_ms) if s in slow)
        if inside > 0:
            parts.append(f"{dur(inside / max(1, tail.episodes))} in {o.op}" + (f" from {o.site}" if o.site else ""))
    return f"of each, {', '.join(parts)}" if parts else None


def _sampled(rf: RankFacts, th: Thresholds):
    """The script's frame that the stack sampler found most in the slow steps, outside any
    named operation and the DataLoader, when it holds ``tail_cause_min_share`` of those samples
    and recurs (seen in two slow steps or more, or in the only one); else ``None``."""
    tail = rf.stats.tail
    assert tail is not None
    slow = set(tail.slow_steps)
    frames = [f for f in rf.stats.host_work.frames if slow & set(f.steps)]
    total = sum(f.samples for f in frames)
    top = next((f for f in frames if not f.op), None)
    if top is None or total == 0 or top.samples < th.tail_cause_min_share * total:
        return None
    if len(slow & set(top.steps)) < min(2, len(slow)):
        return None
    return top, top.samples / total, frames


def _sampled_cause(rf: RankFacts, th: Thresholds, hit) -> tuple[str, str, str, Data]:
    tail = rf.stats.tail
    assert tail is not None
    top, share, frames = hit
    each = share * tail.excess_ms / max(1, tail.episodes)
    listed = ", ".join(f"{f.site} {dur(f.ms)}" for f in frames[:3])
    chain = " < ".join((top.site, *top.callers))
    kind = kind_of(top.lib)
    return (f"spends {dur(each)} in {top.site}",
            f"where the training thread was in the slow steps (its stack, sampled once a step ran "
            f"long), over those steps: {listed}; {chain}"
            + (f", inside {top.lib}" if top.lib else ""),
            frame_fix(kind, top.function), ())


Data = tuple[tuple[str, float], ...]


def epoch_work_fix(work_ms: float) -> str:
    """The prescription for the script's own per-epoch work (``work_ms`` an epoch): run it less
    often or off the training step. Text only: when a script saves is part of what it does."""
    return (f"# the script's own per-epoch work ({ms(work_ms)} an epoch): checkpoints,\n"
            "# evaluation, image or metric dumps - every N epochs, or off the training step\n"
            "# (torch.distributed.checkpoint.async_save, a thread for image writes)\n"
            "if epoch % 10 == 9:\n"
            "    torch.save(model.state_dict(), path)")


def _boundary(tail) -> tuple[float, float, float, float, float]:
    """An epoch boundary's time beyond the median step and its measured parts, per boundary:
    (total, first-batch wait, blocked in syncs, extra syncs, other host work)."""
    per = len(tail.slow_steps) / max(1, tail.episodes)  # slow steps per boundary
    total = tail.excess_ms / max(1, tail.episodes)
    data = max(0.0, tail.extra_data_wait_ms) * per
    sync = max(0.0, tail.extra_sync_ms) * per
    syncs = max(0.0, tail.extra_syncs) * per
    return total, data, sync, syncs, max(0.0, total - data - sync)


def _boundary_data(tail, epoch: int | None, restart: bool) -> Data:
    total, data, sync, syncs, host = _boundary(tail)
    return (("epoch_steps", float(epoch or 0)), ("boundary_ms", round(total, 2)),
            ("first_batch_wait_ms", round(data, 2)), ("worker_restart", 1.0 if restart else 0.0),
            ("sync_ms", round(sync, 2)), ("host_syncs", round(syncs, 2)), ("host_work_ms", round(host, 2)))


def _cause(rf: RankFacts, th: Thresholds, world: int) -> tuple[str, str, str, Data]:
    """(what, evidence, fix, data) for the slow steps of ``rf``: the loader, syncs, or other host
    work; ``data`` (the parts of an epoch boundary, module docstring) only at epoch boundaries."""
    tail = rf.stats.tail
    assert tail is not None
    extra = tail.excess_ms / len(tail.slow_steps)
    loader = main_loader(rf.config)
    epoch = _epoch_steps(rf, world)
    at_epochs = bool(epoch and tail.period and abs(tail.period - epoch) <= 1)
    if tail.extra_data_wait_ms >= th.tail_cause_min_share * extra and at_epochs and loader is not None:
        restart = loader.num_workers > 0 and not loader.persistent_workers
        evidence = (f"the slow steps come every {epoch} steps, one epoch ({loader.dataset_len} "
                    f"samples / batch {loader.batch_size}); data wait {ms(tail.extra_data_wait_ms)} "
                    f"above the median; num_workers={loader.num_workers}, "
                    f"persistent_workers={loader.persistent_workers}")
        data = _boundary_data(tail, epoch, restart)
        if restart:
            return ("waits for the DataLoader's workers to restart at the start of an epoch",
                    evidence,
                    f"loader = DataLoader(dataset, batch_size={loader.batch_size}, num_workers="
                    f"{loader.num_workers},\n"
                    "                    persistent_workers=True)   # keep the workers between epochs",
                    data)
        return ("waits for the first batch of an epoch",
                evidence + ": the DataLoader does not prefetch across epochs, so each epoch "
                           "begins with an empty queue",
                "# the stall is one batch's preparation time: make a batch cheaper to produce\n"
                "#  - in-memory tensors: index whole batches (a BatchSampler as sampler, batch_size=None)\n"
                "#    instead of collating samples one by one, or keep the data on the GPU\n"
                "#    (gpudoctor.train.GpuLoader)\n"
                "#  - or fewer, longer epochs (a sampler that spans several passes)",
                data)
    if tail.extra_data_wait_ms >= th.tail_cause_min_share * extra:
        return (
            "waits for the DataLoader",
            f"in the slow steps the data wait is {ms(tail.extra_data_wait_ms)} above the median "
            f"{ms(rf.stats.data_wait_ms)}",
            "# the workers fall behind in bursts: restarts each epoch, a slow sample or shard\n"
            "loader = DataLoader(dataset, ..., persistent_workers=True,  # no restart each epoch\n"
            "                    prefetch_factor=4)                       # a deeper queue absorbs bursts\n"
            "# and make the slowest samples cheaper (decode, augmentation) - see gpudoctor tune loader",
            (),
        )
    if at_epochs and loader is not None:
        return _epoch_boundary(rf, th, epoch, loader)
    hit = _sampled(rf, th)
    if hit is not None and tail.extra_sync_ms < th.tail_cause_min_share * extra:
        return _sampled_cause(rf, th, hit)  # not blocked in syncs most of the time: the function says more
    if tail.extra_syncs >= th.sync_min_per_step:
        return (
            "synchronises with the GPU",
            f"the slow steps make {tail.extra_syncs:.1f} more host syncs than the median step",
            "# a metric read, print or check every N steps waits for all queued GPU work:\n"
            "# read accumulated GPU tensors less often, or asynchronously\n"
            "if step % log_every == 0:\n"
            "    log(running_loss.item() / log_every)",
            (),
        )
    if hit is not None:
        return _sampled_cause(rf, th, hit)
    return (
        "does extra host work",
        "neither the data wait nor the host syncs explain the slow steps",
        "# look at what the script does every N steps: evaluation, checkpointing, logging,\n"
        "# garbage collection (gc.freeze() after start-up), or another process on the machine\n"
        "# (gpudoctor monitor)",
        (),
    )


def _epoch_boundary(rf: RankFacts, th: Thresholds, epoch: int | None, loader) -> tuple[str, str, str, Data]:
    """(what, evidence, fix, data) of a stall at every epoch boundary, split into the parts the step
    records measure, each named with its prescription when it carries at least
    ``tail_cause_part_min_share`` of the boundary's time beyond the median step: the wait for
    the first batch (restarted workers), host syncs (metric reads, image dumps that run the
    model), and the rest of the host work (checkpoints, file writes, evaluation)."""
    tail = rf.stats.tail
    assert tail is not None
    total, data, sync, syncs, host = _boundary(tail)
    big = lambda part: total > 0 and part >= th.tail_cause_part_min_share * total  # noqa: E731
    restart = loader.num_workers > 0 and not loader.persistent_workers
    parts = [f"{ms(data)} waiting for the first batch"
             + (f" (the DataLoader's {loader.num_workers} workers restart each epoch)" if restart else ""),
             f"{ms(sync)} blocked in {syncs:.0f} more host sync(s)",
             f"{ms(host)} of other host work"]
    evidence = (f"the slow steps come every {epoch} steps, one epoch ({loader.dataset_len} samples / "
                f"batch {loader.batch_size}); each epoch boundary takes {ms(total)} beyond the median "
                f"step: {', '.join(parts)}")
    named = _named_line(rf)
    if named:
        evidence += f"; {named}"
    fix = ""
    if restart:
        fix += (f"loader = DataLoader(dataset, batch_size={loader.batch_size}, num_workers="
                f"{loader.num_workers},\n"
                f"                    persistent_workers=True)   # no worker restart each epoch\n")
    elif big(data):
        fix += ("# the first batch of each epoch waits (no prefetch across epochs): fewer, longer\n"
                "# epochs, or a batch that is cheaper to produce\n")
    found = _boundary_data(tail, epoch, restart)
    if big(sync) or big(host) or not fix:
        fix += epoch_work_fix(sync + host)
        found += (("epoch_work_ms", round(sync + host, 2)),)
    return ("does the work of an epoch boundary", evidence, fix.rstrip("\n"), found)


def _stalls(rf: RankFacts, th: Thresholds, world: int) -> list[Finding]:
    tail = rf.stats.tail
    if tail is None or not tail.stalls:
        return []  # too few, too cheap, or too many: bimodal step times (Tail.stalls)
    idle = 1.0 - rf.busy_frac if rf.busy_frac is not None else None
    if idle is not None and idle < th.tail_min_excess:
        return []  # the GPU stayed busy through the slow host steps: queued work hid them
    extra = tail.excess_ms / len(tail.slow_steps)
    if (named_share(rf) >= th.tail_cause_min_share and not at_epoch_boundaries(rf, world)
            and tail.extra_data_wait_ms < th.tail_cause_min_share * extra):
        return []  # GD-RUN-HOST-*: the named operation, its measured share and its fix
    what, cause_line, fix, data = _cause(rf, th, world)
    if what == "waits for the DataLoader" and rf.breakdown.share("data") >= th.data_wait_min_share:
        # workers that fall behind every few batches: the mean data wait counts these steps, and
        # GD-RUN-DATALOADER's fix (more workers, a deeper queue) is the one for them
        return []
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
        evidence=evidence, fix=fix, data=data,
    )


__all__ = ["CODE_STALL", "at_epoch_boundaries", "check_periodic_stalls", "epoch_work_fix", "named_share"]
