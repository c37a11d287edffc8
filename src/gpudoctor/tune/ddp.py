"""The ddp knob: ``bucket_cap_mb`` and the gradient compression hook, measured under torchrun.

Rules of thumb say "always compress gradients to fp16"; measured on 2 x H200 the bf16 hook made
DDP 14% slower (NVLink is fast, the casts are not free). So both are measured: the bucket sizes
with no hook first, then the fp16 and bf16 hooks at the chosen size. Every rank runs the same
trials (DDP steps are collectives), and each trial's step time is the slowest rank's (all-reduce
MAX): that is the rate the job runs at. Needs ``torchrun --nproc_per_node N`` with N >= 2.
"""

from __future__ import annotations

import dataclasses

from gpudoctor.records.tune import KnobResult, Trial, TrialVerdict
from gpudoctor.tune.search import pick_cheapest
from gpudoctor.tune.session import TuneContext
from gpudoctor.tune.trials import execute

BUCKETS_MB = (25.0, 10.0, 50.0, 100.0)
HOOKS = ("fp16", "bf16")


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

    def run(bucket: float, hook: str | None) -> Trial:
        config = ctx.config.replace(parallel=dataclasses.replace(ctx.config.parallel, bucket_cap_mb=bucket,
                                                                 timeout_s=min(ctx.config.parallel.timeout_s, 300.0)))
        setting = f"bucket_cap_mb={bucket:g} hook={hook or 'none'}"
        spec = ctx.spec("ddp", setting, {"parallel.bucket_cap_mb": bucket, "comm_hook": hook or "none"},
                        config=config, strategy="ddp", comm_hook=hook)
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
    bucket, best = BUCKETS_MB[pick], buckets[pick]
    hooked = [run(bucket, h) for h in HOOKS]
    options = [best, *hooked]
    won = ctx.agree(pick_cheapest([t.samples_per_s if t.verdict is TrialVerdict.OK else None for t in options],
                                  tolerance=ctx.options.tolerance))
    hook = (None, *HOOKS)[won or 0]
    winner = options[won or 0]
    ctx.config = ctx.config.replace(parallel=dataclasses.replace(ctx.config.parallel, bucket_cap_mb=bucket))
    notes = []
    for t in hooked:
        if t.samples_per_s and best.samples_per_s:
            notes.append(f"{t.setting}: {t.samples_per_s / best.samples_per_s:.2f}x of no hook")
    if hook is not None:
        notes.append(f"TrainConfig has no comm-hook field: register it yourself after wrapping, "
                     f"model.register_comm_hook(None, default_hooks.{hook}_compress_hook)")
    return KnobResult(knob="ddp", trials=tuple(ctx.trials[first:]), winner=winner.setting,
                      params={"parallel.bucket_cap_mb": bucket, "comm_hook": hook or "none"},
                      summary=f"bucket_cap_mb={bucket:g}, comm hook {hook or 'none'} (slowest rank's rate)",
                      notes=tuple(notes))
