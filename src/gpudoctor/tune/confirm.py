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
* When the tuned whole loses, :func:`confirm` tries a **fallback**: a part of the tuned
  configuration, confirmed against the start the same interleaved way; the first part that wins
  beyond the noise is written (:func:`fallbacks` says which parts, and why those).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Sequence
from typing import Any

from gpudoctor.records.tune import KnobResult, Trial, TrialVerdict
from gpudoctor.tune.loader import gpu_rate, input_bound
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
    """The confirmation's table (then each fallback's) and whether ``ctx.config`` is written."""

    results: tuple[KnobResult, ...]
    write: bool


@dataclasses.dataclass(frozen=True, kw_only=True)
class Step:
    """A stage that changed the configuration: the configuration it left (the stages before it
    included) and whether its deciding trials ran through the real DataLoader, as training runs
    (``fed``), or with the data already on the device."""

    name: str
    config: Any
    loader: LoaderSettings
    fed: bool


@dataclasses.dataclass(frozen=True, kw_only=True)
class Fallback:
    """The configuration after ``kept``'s last stage, and the stages it leaves out, each with why."""

    kept: tuple[Step, ...]
    dropped: tuple[tuple[str, str], ...]

    @property
    def names(self) -> str:
        return ", ".join(s.name for s in self.kept)

    def lines(self) -> tuple[str, ...]:
        """What was kept and what was dropped, in words: one line per reason."""
        out = [f"kept: {self.names} (the stages as they ran, up to {self.kept[-1].name}: each was tuned on what the "
               "ones before it chose)"]
        for why in dict.fromkeys(w for _, w in self.dropped):
            out.append(f"dropped {', '.join(n for n, w in self.dropped if w == why)}: {why}")
        return tuple(out)


def _batch(ctx: TuneContext, config: Any) -> int:
    return max(1, min(config.batch_size or 32, len(ctx.target.train_dataset) // ctx.world_size))


def _steps(ctx: TuneContext, rate: float | None, batch: int) -> int:
    window = CONFIRM_WINDOWS * ctx.options.window_s  # longer than a stage's trial: it decides what is written
    by_time = math.ceil(window * rate / batch) if rate else ctx.steps
    return min(_MAX_STEPS, max(ctx.steps, by_time))


KEPT = "the starting configuration is kept and nothing is written"
NEXT = "not written; a part of it is confirmed next"


def decide(start_row: Trial, tuned_row: Trial, tolerance: float, *, name: str = "tuned",
           lost: str = KEPT) -> tuple[bool, str]:
    """Whether the ``name`` configuration is written, and why in words (pure: the confirmation's
    rows); ``lost`` says what happens when it does not win."""
    start, tuned = measured(start_row), measured(tuned_row)
    if tuned is None:
        return False, f"the {name} configuration failed its confirmation ({tuned_row.reason}): " + (
            "nothing written" if lost == KEPT else lost)
    if start is None:
        return True, f"the starting configuration failed ({start_row.reason}); the {name} one ran: written"
    gain, margin = compare(tuned, start, tolerance)
    figures = f"{name} {tuned.median:,.0f} vs starting {start.median:,.0f} samples/s, {gain:.2f}x round by round"
    if gain > 1 + margin:
        return True, f"{figures} (beyond the +-{margin:.0%} noise): written"
    where = "inside" if gain >= 1 - margin else "below"
    why = f"{figures} ({where} the +-{margin:.0%} noise): {lost}"
    tip = too_noisy(margin) if where == "inside" else ""
    return False, f"{why}; {tip}" if tip else why


def fallbacks(steps: Sequence[Step], fed: float | None, gpu: float | None) -> list[Fallback]:
    """The parts of the tuned configuration worth confirming when the whole lost, longest first.

    Each part is the configuration some stage left: the stages up to it, in the order they ran.
    Every stage was tuned from what the stages before it chose (the scaler's ``init_scale`` under
    the dtype precision picked, the batch under that dtype), so such a part is a combination the
    trials built on; a part that skips a middle stage is one no trial measured. The order they ran
    is the plan's order of what stages usually gain (the loader first when the starting loader
    could not feed the GPU), so dropping the last ones one at a time drops the least valuable first.

    When the loader still cannot feed the GPU (``fed`` samples/s, below what the GPU takes,
    ``gpu``), a stage whose trials ran with the data on the device measured a gain that cannot
    reach training past the loader, and one that asks more of the loader (a larger batch) can lose
    it (ResNet-50 on an H200: batch 1024 won 1.32x on the device, the whole 0.81x through the
    loader). So the parts start at the longest one whose stages were all measured through the
    real DataLoader. A single changed stage has no part but the start: no fallback."""
    longest = len(steps) - 1
    bound = fed is not None and gpu is not None
    if bound:
        longest = min(longest, next((i for i, s in enumerate(steps) if not s.fed), len(steps)))
    out: list[Fallback] = []
    for k in range(longest, 0, -1):
        dropped = []
        for s in steps[k:]:
            if bound and not s.fed:
                why = (f"measured with the data on the device, while the loader feeds {fed:,.0f} of the {gpu:,.0f} "
                       f"samples/s the GPU takes ({fed / gpu:.0%}): a gain there cannot reach training")
            else:
                why = "ran after the stages kept, and a configuration with it lost its confirmation"
            dropped.append((s.name, why))
        out.append(Fallback(kept=tuple(steps[:k]), dropped=tuple(dropped)))
    return out


def _left_s(ctx: TuneContext) -> float | None:
    budget = ctx.options.budget_s
    return None if budget is None else budget - ctx.elapsed()


def _versus(ctx: TuneContext, knob: str, start_config: Any, start_loader: LoaderSettings, config: Any,
            loader: LoaderSettings, name: str) -> tuple[Trial, Trial, str]:
    """The starting configuration against ``config``, interleaved and repeated, as training runs them."""
    ctx.confirming = True
    try:
        warmup = ctx.options.warmup + 2  # + the loader's queues filling
        start_batch, tuned_batch = _batch(ctx, start_config), _batch(ctx, config)
        strategy = "ddp" if ctx.world_size > 1 else "none"  # under torchrun: as the job trains, DDP included
        rate = ctx.consumption_rate if config.batch_size == ctx.config.batch_size else None
        specs = [
            ctx.spec(knob, f"starting configuration (batch {start_batch})", {}, config=start_config,
                     mode="loader", batch_size=start_batch, loader=start_loader, warmup=warmup, strategy=strategy,
                     steps=_steps(ctx, ctx.reference_rate, start_batch)),
            ctx.spec(knob, f"{name} configuration (batch {tuned_batch})", {}, config=config, mode="loader",
                     batch_size=tuned_batch, loader=loader, warmup=warmup, strategy=strategy,
                     steps=_steps(ctx, rate or ctx.reference_rate, tuned_batch)),
        ]
        start_row, tuned_row = ctx.measure(specs, repeats=max(CONFIRM_ROUNDS, ctx.options.repeats))
    finally:
        ctx.confirming = False
    note = (f"each run as training runs it (real DataLoader, compile included), timed past {warmup} warm-up steps; "
            f"{max(CONFIRM_ROUNDS, ctx.options.repeats)} interleaved rounds, median and spread")
    return start_row, tuned_row, note


def confirm(ctx: TuneContext, start_config: Any, start_loader: LoaderSettings, steps: Sequence[Step] = (),
            say: Callable[[str], None] = lambda line: None) -> Checked:
    """Starting vs tuned, interleaved and repeated, each as training runs it; when the tuned whole
    loses, the parts :func:`fallbacks` lists, longest first, until one wins beyond the noise.

    The budget: a fallback is not reserved in the plan (most runs never need one: the reserve would
    cut stages that win); it runs only when the time left in the budget holds what the
    confirmation just took (a fallback runs the same starting arm, and an arm no larger than the
    tuned one), else the result says it was not run and what it needed."""
    if ctx.config == start_config and ctx.loader == start_loader:
        return Checked(write=True, results=(KnobResult(
            knob="confirm", summary="no setting changed: the starting configuration is written as it is"),))
    fed = input_bound(ctx)
    fed, gpu = ctx.agree((fed, gpu_rate(ctx) if fed else None))  # rank 0's: every rank confirms the same parts
    parts = fallbacks(steps, fed, gpu)
    start_row, tuned_row, note = _versus(ctx, "confirm", start_config, start_loader, ctx.config, ctx.loader, "tuned")
    write, why = decide(start_row, tuned_row, ctx.options.tolerance, lost=NEXT if parts else KEPT)
    write = bool(ctx.agree(write))
    results = [KnobResult(knob="confirm", trials=(start_row, tuned_row), summary=why, notes=(note,),
                          winner=(tuned_row if write else start_row).setting)]
    say(f"confirm: {why}")
    if write or not parts:
        return Checked(write=write, results=tuple(results))
    cost = sum(t.wall_s for t in (start_row, tuned_row))
    for i, part in enumerate(parts):
        left = _left_s(ctx)
        if bool(ctx.agree(left is not None and left < cost)):
            results.append(KnobResult(knob="fallback", summary=(
                f"not run: confirming the tuned configuration less {_names(part)} needs ~{cost:.0f} s (what the "
                f"confirmation took), {max(left or 0.0, 0.0):.0f} s of the budget was left: "
                f"{KEPT}; raise --budget-s to confirm it")))
            say(f"fallback: {results[-1].summary}")
            break
        say(f"fallback: confirming {part.names} only (less {_names(part)}) ...")
        start_row, row, note = _versus(ctx, "fallback", start_config, start_loader, part.kept[-1].config,
                                       part.kept[-1].loader, "fallback")
        write, why = decide(start_row, row, ctx.options.tolerance, name="fallback",
                            lost=KEPT if i == len(parts) - 1 else "not written; a shorter part is confirmed next")
        write = bool(ctx.agree(write))
        results.append(KnobResult(
            knob="fallback", trials=(start_row, row), winner=(row if write else start_row).setting, summary=why,
            notes=(*part.lines(), note)))
        say(f"fallback: {why}")
        if write:
            ctx.config, ctx.loader = part.kept[-1].config, part.kept[-1].loader
            return Checked(write=True, results=tuple(results))
    return Checked(write=False, results=tuple(results))


def _names(part: Fallback) -> str:
    return ", ".join(n for n, _ in part.dropped)
