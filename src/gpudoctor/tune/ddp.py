"""The ddp knob: ``bucket_cap_mb`` and the gradient compression hook, measured under torchrun.

Rules of thumb say "always compress gradients to fp16"; measured on 2 x H200 at 1024 samples per
rank both hooks made DDP 3.8% slower (NVLink is fast, the casts are not free). So both are measured: the bucket sizes
with no hook first, then no hook, fp16 and bf16 at the chosen size, interleaved over
:data:`HOOK_ROUNDS` rounds in a rotating order and judged on each arm's median. (One run per arm
was not enough on 2 x H200: run-to-run noise of a few percent picked no hook where fp16 was 6%
faster, and the bucket trials' best of four favours no hook, so it is measured again.) Every
rank runs the same
trials (DDP steps are collectives), and each trial's step time is the slowest rank's (all-reduce
MAX): that is the rate the job runs at. Needs ``torchrun --nproc_per_node N`` with N >= 2.
"""

from __future__ import annotations

import dataclasses
import statistics
from collections.abc import Sequence

from gpudoctor.records.tune import KnobResult, Trial, TrialVerdict
from gpudoctor.tune.noise import rotated
from gpudoctor.tune.search import pick_cheapest
from gpudoctor.tune.session import TuneContext
from gpudoctor.tune.trials import execute

BUCKETS_MB = (25.0, 10.0, 50.0, 100.0)
HOOKS = ("fp16", "bf16")
HOOK_ROUNDS = 3


def arm_medians(rates: Sequence[Sequence[float | None]]) -> list[float | None]:
    """Per arm, the median rate over its rounds; ``None`` when any round failed."""
    return [None if not r or any(x is None for x in r) else statistics.median(r) for r in rates]


def _slowest(ctx: TuneContext, trial: Trial) -> Trial:
    """The trial with the slowest rank's step time (a collective + SYNC)."""
    import torch
    import torch.distributed as dist

    ms = trial.step_ms if trial.verdict is TrialVerdict.OK and trial.step_ms else float("inf")
    t = torch.tensor([ms], dtype=torch.float64, device=ctx.device if ctx.cuda else "cpu")
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    worst = float(t.item())  # SYNC
    if worst == float("inf"):
        if trial.verdict is TrialVerdict.OK:
            return dataclasses.replace(trial, verdict=TrialVerdict.FAILED, reason="another rank failed this trial",
                                       samples_per_s=None)
        return trial
    batch = ctx.batch_size
    return dataclasses.replace(trial, step_ms=worst, samples_per_s=batch * 1e3 / worst)


def tune_ddp(ctx: TuneContext) -> KnobResult:
    """Choose ``parallel.bucket_cap_mb`` and the comm hook; update ``ctx.config``."""
    first = len(ctx.trials)
    if ctx.world_size < 2:
        ctx.skip("ddp", "bucket_cap_mb / comm hook", {}, "needs torchrun with 2 or more ranks "
                 "(torchrun --nproc_per_node 2 -m gpudoctor tune ddp ...)")
        return KnobResult(knob="ddp", trials=tuple(ctx.trials[first:]),
                          summary="skipped: one process has no gradient communication to tune")

    def run(bucket: float, hook: str | None, round_: int | None = None) -> Trial:
        config = ctx.config.replace(parallel=dataclasses.replace(
            ctx.config.parallel, bucket_cap_mb=bucket, comm_hook=hook or "none",
            timeout_s=min(ctx.config.parallel.timeout_s, 300.0)))
        setting = f"bucket_cap_mb={bucket:g} hook={hook or 'none'}" + (f" round {round_}" if round_ else "")
        spec = ctx.spec("ddp", setting, {"parallel.bucket_cap_mb": bucket, "parallel.comm_hook": hook or "none"},
                        config=config, strategy="ddp")
        trial = _slowest(ctx, execute(ctx.target, spec, ctx.runner.pools()))  # in-process: DDP needs the group
        ctx.trials.append(trial)
        ctx.on_trial(trial)
        return trial

    buckets = [run(b, None) for b in BUCKETS_MB]
    pick = pick_cheapest([t.samples_per_s if t.verdict is TrialVerdict.OK else None for t in buckets],
                         tolerance=ctx.options.tolerance)
    pick = ctx.agree(pick)
    if pick is None:
        return KnobResult(knob="ddp", trials=tuple(ctx.trials[first:]),
                          summary="no DDP trial ran cleanly; see the reasons in the table")
    bucket = BUCKETS_MB[pick]
    arms: tuple[str | None, ...] = (None, *HOOKS)
    runs: list[list[Trial]] = [[] for _ in arms]
    for r in range(HOOK_ROUNDS):
        for i in rotated(range(len(arms)), r):
            runs[i].append(run(bucket, arms[i], round_=r + 1))
    medians = arm_medians([[t.samples_per_s if t.verdict is TrialVerdict.OK else None for t in arm] for arm in runs])
    won = ctx.agree(pick_cheapest(medians, tolerance=ctx.options.tolerance))
    hook = arms[won] if won is not None else None
    winner = max(runs[won], key=lambda t: t.samples_per_s or 0.0) if won is not None else buckets[pick]
    ctx.config = ctx.config.replace(parallel=dataclasses.replace(ctx.config.parallel, bucket_cap_mb=bucket,
                                                                 comm_hook=hook or "none"))
    notes = [f"bucket_cap_mb={bucket:g}, median of {HOOK_ROUNDS} interleaved rounds: " + ", ".join(
        f"{h or 'no hook'} {m:,.0f}/s" if m else f"{h or 'no hook'} failed" for h, m in zip(arms, medians))]
    base = medians[0]
    for h, m in zip(arms[1:], medians[1:]):
        if m and base:
            notes.append(f"{h} hook: {m / base:.2f}x of no hook")
    if hook is not None:
        notes.append(f"written as parallel.comm_hook = \"{hook}\": the engine registers PyTorch's "
                     f"{hook}_compress_hook; in your own loop: "
                     f"model.register_comm_hook(None, default_hooks.{hook}_compress_hook)")
    return KnobResult(knob="ddp", trials=tuple(ctx.trials[first:]), winner=winner.setting,
                      params={"parallel.bucket_cap_mb": bucket, "parallel.comm_hook": hook or "none"},
                      summary=f"bucket_cap_mb={bucket:g}, comm hook {hook or 'none'} "
                              f"(slowest rank's rate, median of {HOOK_ROUNDS} rounds)",
                      notes=tuple(notes))
