"""The session's two ends: the reference trial that sizes the plan, and the confirmation that
decides whether the tuned configuration is written.

* :func:`reference` runs the starting configuration once (data on the device): its step time sets
  how many steps every later trial measures (at least ``window_s`` of steps) and, with its set-up
  time, the budget plan (:mod:`.plan`).
* :func:`confirm` runs the starting and the tuned configuration against each other, each the way
  training runs it (the real ``DataLoader``, compile included), interleaved over
  :data:`~gpudoctor.tune.plan.CONFIRM_ROUNDS` rounds, each run timed from past its warm-up (cuDNN
  autotuning, compile, workers started and queues filled). The tuned one is written only when its
  median beats the starting one's beyond the noise; otherwise nothing is written and the result
  says why (never worse than where the user started) and, when the noise band was wider than
  :data:`~gpudoctor.tune.noise.NOISY`, that the machine was too noisy to confirm and what to do.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

from gpudoctor.records.tune import KnobResult, Trial, TrialVerdict
from gpudoctor.tune.loader import input_bound
from gpudoctor.tune.noise import compare, too_noisy
from gpudoctor.tune.plan import CONFIRM_ROUNDS, Plan, make_plan
from gpudoctor.tune.session import TuneContext, measured
from gpudoctor.tune.target import LoaderSettings

_MAX_STEPS = 2000
CONFIRM_WINDOWS = 3  # a confirmation run measures this many trial windows (3 s at the default 1 s)
_FALLBACK_STEP_S = 0.1  # when the starting configuration failed its reference trial


def reference(ctx: TuneContext, order: list[str]) -> tuple[KnobResult, Plan]:
    """Measure the starting configuration once; size the trials; plan the budget."""
    opts = ctx.options
    trial = ctx.run(ctx.spec("plan", "starting configuration (data on the device)", {}, warmup=opts.warmup,
                             steps=opts.steps))
    steps_run = opts.warmup + opts.steps
    notes: list[str] = []
    if trial.verdict is TrialVerdict.OK and trial.step_ms:
        step_s = trial.step_ms / 1e3
        setup_s = max(0.2, trial.wall_s - steps_run * step_s)
        ctx.consumption_rate = None  # measured again at the batch the batch knob picks
    else:
        step_s, setup_s = _FALLBACK_STEP_S, max(0.2, trial.wall_s)
        notes.append(f"the starting configuration did not run ({trial.verdict.value}: {trial.reason}); the plan "
                     f"assumes {step_s * 1e3:.0f} ms a step")
    ctx.steps = min(_MAX_STEPS, max(opts.steps, math.ceil(opts.window_s / step_s)))
    ctx.reference_rate = trial.samples_per_s if trial.verdict is TrialVerdict.OK else None
    trials, loader_bound = (trial,), False
    if ("loader" in order or "batch" in order) and ctx.reference_rate:  # both act on what the loader feeds
        fed = _fed(ctx, ctx.reference_rate)
        trials += (fed,)
        ctx.fed_rate = fed.samples_per_s if fed.verdict is TrialVerdict.OK else None
        if fed.verdict is TrialVerdict.OK and fed.step_ms and fed.wall_s:
            # the reference paid the process's one-time costs (CUDA context, the first cuDNN autotuning):
            # the trial after it is what a later trial's set-up costs (ResNet-50 on an H200: 16.1 s vs 3.2 s)
            setup_s = min(setup_s, max(0.2, fed.wall_s - fed.steps * fed.step_ms / 1e3))
        if input_bound(ctx):
            loader_bound = "loader" in order
            notes.append(f"the starting loader feeds {fed.samples_per_s:,.0f} samples/s, the GPU takes "
                         f"{ctx.reference_rate:,.0f} with the data on the device: " + (
                             "the loader stage is kept first in the plan (no other stage's gain reaches training "
                             "past it)" if loader_bound else "a larger batch is checked through the loader"))
    plan = make_plan(order, opts.budget_s, step_s=step_s, setup_s=setup_s, warmup=opts.warmup, steps=ctx.steps,
                     repeats=opts.repeats, cuda=ctx.cuda, world_size=ctx.world_size,
                     compile_trial=opts.compile, spent_s=ctx.elapsed(), loader_bound=loader_bound)
    plan = ctx.agree(plan)
    ctx.reserve_s = plan.confirm_s
    ctx.compile_cut = plan.compile_cut
    notes.append(f"each trial: {opts.warmup} warm-up steps, then {ctx.steps} measured steps (at least "
                 f"{opts.window_s:g} s at {step_s * 1e3:.1f} ms a step), {opts.repeats} runs of each setting")
    summary = (f"{trial.samples_per_s:,.0f} samples/s at batch {ctx.batch_size}, {step_s * 1e3:.1f} ms a step, "
               f"{setup_s:.1f} s set-up per trial" if trial.verdict is TrialVerdict.OK
               else "the starting configuration failed")
    return KnobResult(knob="plan", trials=trials, summary=summary, notes=(*notes, *plan.lines())), plan


def _fed(ctx: TuneContext, device_rate: float) -> Trial:
    """The starting configuration fed by its own loader (real DataLoader), run as one of the
    confirmation's runs: past the workers' start and the queues filling, its window of steps."""
    batch = _batch(ctx, ctx.config)
    return ctx.run(ctx.spec("plan", "starting loader (real DataLoader)", {}, mode="loader", batch_size=batch,
                            warmup=ctx.options.warmup + 2, steps=_steps(ctx, device_rate, batch)))


@dataclasses.dataclass(frozen=True, kw_only=True)
class Checked:
    """The confirmation's table and whether the tuned configuration is written."""

    result: KnobResult
    write: bool


def _batch(ctx: TuneContext, config: Any) -> int:
    return max(1, min(config.batch_size or 32, len(ctx.target.train_dataset) // ctx.world_size))


def _steps(ctx: TuneContext, rate: float | None, batch: int) -> int:
    window = CONFIRM_WINDOWS * ctx.options.window_s  # longer than a stage's trial: it decides what is written
    by_time = math.ceil(window * rate / batch) if rate else ctx.steps
    return min(_MAX_STEPS, max(ctx.steps, by_time))


def decide(start_row: Trial, tuned_row: Trial, tolerance: float) -> tuple[bool, str]:
    """Whether the tuned configuration is written, and why in words (pure: the confirmation's rows)."""
    start, tuned = measured(start_row), measured(tuned_row)
    if tuned is None:
        return False, f"the tuned configuration failed its confirmation ({tuned_row.reason}): nothing written"
    if start is None:
        return True, f"the starting configuration failed ({start_row.reason}); the tuned one ran: written"
    gain, margin = compare(tuned, start, tolerance)
    figures = f"tuned {tuned.median:,.0f} vs starting {start.median:,.0f} samples/s, {gain:.2f}x round by round"
    if gain > 1 + margin:
        return True, f"{figures} (beyond the +-{margin:.0%} noise): written"
    where = "inside" if gain >= 1 - margin else "below"
    why = f"{figures} ({where} the +-{margin:.0%} noise): the starting configuration is kept and nothing is written"
    tip = too_noisy(margin) if where == "inside" else ""
    return False, f"{why}; {tip}" if tip else why


def confirm(ctx: TuneContext, start_config: Any, start_loader: LoaderSettings) -> Checked:
    """Starting vs tuned, interleaved and repeated, each as training runs it."""
    if ctx.config == start_config and ctx.loader == start_loader:
        return Checked(write=True, result=KnobResult(
            knob="confirm", summary="no setting changed: the starting configuration is written as it is"))
    ctx.confirming = True
    try:
        warmup = ctx.options.warmup + 2  # + the loader's queues filling
        start_batch, tuned_batch = _batch(ctx, start_config), _batch(ctx, ctx.config)
        strategy = "ddp" if ctx.world_size > 1 else "none"  # under torchrun: as the job trains, DDP included
        specs = [
            ctx.spec("confirm", f"starting configuration (batch {start_batch})", {}, config=start_config,
                     mode="loader", batch_size=start_batch, loader=start_loader, warmup=warmup, strategy=strategy,
                     steps=_steps(ctx, ctx.reference_rate, start_batch)),
            ctx.spec("confirm", f"tuned configuration (batch {tuned_batch})", {}, config=ctx.config, mode="loader",
                     batch_size=tuned_batch, loader=ctx.loader, warmup=warmup, strategy=strategy,
                     steps=_steps(ctx, ctx.consumption_rate or ctx.reference_rate, tuned_batch)),
        ]
        start_row, tuned_row = ctx.measure(specs, repeats=max(CONFIRM_ROUNDS, ctx.options.repeats))
    finally:
        ctx.confirming = False
    write, why = decide(start_row, tuned_row, ctx.options.tolerance)
    write = bool(ctx.agree(write))
    return Checked(write=write, result=KnobResult(
        knob="confirm", trials=(start_row, tuned_row), winner=(tuned_row if write else start_row).setting,
        summary=why, notes=(f"each run as training runs it (real DataLoader, compile included), timed past "
                            f"{warmup} warm-up steps; {max(CONFIRM_ROUNDS, ctx.options.repeats)} interleaved "
                            "rounds, median and spread",)))
