"""What a run costs at a price per GPU-hour: per 1,000 optimizer steps, per epoch, the time each
performance finding wastes, and what a fix verified by ``--try`` saves.

Pure arithmetic over figures computed elsewhere, never a step statistic of its own:

* the step: the mean step of :class:`~gpudoctor.analysis.steps.RankStepStats` (warm-up and the
  profiler window left out), the slowest rank's (ranks that synchronise wait for it);
* the GPUs billed: the run's world size (one GPU per rank);
* cost per 1,000 steps = 1,000 x mean step (h) x GPUs x price;
* an epoch: the main loader's (:func:`~gpudoctor.analysis.facts.main_loader`) dataset length,
  per rank (``/ world size`` under a ``DistributedSampler``), over the samples one optimizer step
  takes (the rank's throughput x its mean step, so gradient accumulation counts), else over the
  batch size (one batch per step); unknown without the dataset length and batch size;
* a finding's waste: its ``expected_gain`` (share of the step it would save) x the cost;
* a ``--try`` fix: the same work at the new throughput takes ``before / after`` of the time, so
  it saves ``1 - before / after`` of the baseline's cost; stated only when the comparison
  judged it faster than the run-to-run noise.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from gpudoctor.analysis.facts import RunFacts, main_loader
from gpudoctor.analysis.try_compare import FASTER, TryComparison
from gpudoctor.records.finding import Finding

STEPS_PER_QUOTE = 1000  # costs are quoted per this many optimizer steps
MS_PER_HOUR = 3_600_000.0


@dataclass(frozen=True, slots=True)
class FindingCost:
    """The cost of the time one finding wastes (its expected gain x the run's cost)."""

    code: str
    expected_gain: float
    per_1k_steps: float
    per_epoch: float | None


@dataclass(frozen=True, slots=True)
class RunCost:
    """What a run costs at ``price_per_gpu_hour`` (same currency as the price)."""

    price_per_gpu_hour: float
    gpus: int
    mean_step_ms: float
    per_1k_steps: float
    steps_per_epoch: float | None
    per_epoch: float | None
    per_gpu_hour_of_training: float  # gpus x price: what one hour of this run costs
    findings: tuple[FindingCost, ...] = ()


@dataclass(frozen=True, slots=True)
class TrySavings:
    """What a fix verified by ``--try`` saves: the share of the time and its cost."""

    knobs: tuple[str, ...]
    time_saved_share: float  # 1 - before / after throughput
    per_1k_steps: float
    per_epoch: float | None


def step_cost(mean_step_ms: float, gpus: int, price_per_gpu_hour: float, steps: float = 1.0) -> float:
    """The cost of ``steps`` steps of ``mean_step_ms`` on ``gpus`` GPUs at the price."""
    return steps * mean_step_ms / MS_PER_HOUR * gpus * price_per_gpu_hour


def steps_per_epoch(dataset_len: int | None, batch_size: int | None, *, world_size: int,
                    distributed_sampler: bool, samples_per_step: float | None = None,
                    drop_last: bool = False) -> float | None:
    """Optimizer steps one epoch takes on each rank, or ``None`` when it cannot be known.

    Each rank reads ``ceil(dataset_len / world_size)`` samples under a ``DistributedSampler``,
    the whole dataset otherwise; a step takes ``samples_per_step`` of them when measured, else
    one batch (``drop_last`` drops the partial one).
    """
    if not dataset_len or not batch_size or batch_size <= 0:
        return None
    per_rank = math.ceil(dataset_len / world_size) if distributed_sampler and world_size > 1 else dataset_len
    if samples_per_step is not None and samples_per_step > 0:
        return per_rank / samples_per_step
    batches = per_rank // batch_size if drop_last else math.ceil(per_rank / batch_size)
    return float(batches)


def _epoch_steps(facts: RunFacts, slowest) -> float | None:
    loader = main_loader(slowest.config)
    if loader is None:
        return None
    thr = slowest.stats.samples_per_s
    per_step = thr * slowest.stats.mean_step_ms / 1000.0 if thr else None
    return steps_per_epoch(loader.dataset_len, loader.batch_size, world_size=facts.world_size,
                           distributed_sampler=loader.sampler == "DistributedSampler",
                           samples_per_step=per_step, drop_last=loader.drop_last)


def run_cost(facts: RunFacts, findings: Sequence[Finding], price_per_gpu_hour: float) -> RunCost | None:
    """The cost of the run in ``facts`` and of its findings' waste; ``None`` without steps."""
    if price_per_gpu_hour < 0:
        raise ValueError(f"price per GPU-hour {price_per_gpu_hour} is negative")
    if not facts.ranks:
        return None
    slowest = max(facts.ranks, key=lambda r: r.stats.mean_step_ms)
    mean_ms = slowest.stats.mean_step_ms
    gpus = max(1, facts.world_size)
    per_1k = step_cost(mean_ms, gpus, price_per_gpu_hour, STEPS_PER_QUOTE)
    epoch_steps = _epoch_steps(facts, slowest)
    per_epoch = step_cost(mean_ms, gpus, price_per_gpu_hour, epoch_steps) if epoch_steps is not None else None
    wastes = tuple(
        FindingCost(code=f.code, expected_gain=f.expected_gain, per_1k_steps=f.expected_gain * per_1k,
                    per_epoch=f.expected_gain * per_epoch if per_epoch is not None else None)
        for f in findings if f.expected_gain is not None and f.expected_gain > 0)
    return RunCost(price_per_gpu_hour=price_per_gpu_hour, gpus=gpus, mean_step_ms=mean_ms,
                   per_1k_steps=per_1k, steps_per_epoch=epoch_steps, per_epoch=per_epoch,
                   per_gpu_hour_of_training=gpus * price_per_gpu_hour, findings=wastes)


def try_savings(cost: RunCost, comparison: TryComparison) -> TrySavings | None:
    """What the fix of ``comparison`` saves of the baseline's ``cost``; ``None`` unless the
    comparison judged it faster than the noise (an unverified gain saves nothing)."""
    j = comparison.judgement
    before, after = comparison.before.get("throughput"), comparison.after.get("throughput")
    if j is None or j.verdict != FASTER or not before or not after or after <= before:
        return None
    share = 1.0 - before / after
    return TrySavings(knobs=comparison.knobs, time_saved_share=share, per_1k_steps=share * cost.per_1k_steps,
                      per_epoch=share * cost.per_epoch if cost.per_epoch is not None else None)


__all__ = ["FindingCost", "RunCost", "STEPS_PER_QUOTE", "TrySavings", "run_cost", "step_cost",
           "steps_per_epoch", "try_savings"]
