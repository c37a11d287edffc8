"""The budget plan, pure: how many trials each stage needs, what that costs at the measured step
time, what each stage is given, and what is cut (named, with what it would have needed).
The fallback confirmation (a part of the tuned configuration, when the whole loses: ``confirm.py``)
is not reserved: it runs only when the budget's time left holds what the confirmation took.

The cost of a trial is its set-up (model and optimizer built, moved to the device, first-step
autotuning: the reference trial's wall time minus its steps) plus its steps at the measured step
time. The confirmation (the tuned configuration against the starting one) is reserved first: it
is what makes the result safe to write. The other stages are then kept in order of what they
usually gain (precision, batch, loader, scaler, ddp) and the last ones are cut when the budget
cannot hold them; inside precision the ``torch.compile`` trial, the most expensive one, is cut
first. A stage is given its need plus its share of what is left over; a stage that runs past what
it was given (and past the slack) stops and keeps its starting values.
"""

from __future__ import annotations

import dataclasses
import math
import statistics
from collections.abc import Sequence
from typing import Any

from gpudoctor.records.tune import Trial, TrialVerdict

# What a stage needs, in trials. Each figure is a count of trials the stage's code starts, with
# the reason it is that many.
DTYPE_TRIALS = 4  # fp32, tf32, bf16, fp16
SWITCH_TRIALS = 3  # channels_last, cudnn.benchmark, compile: each against the winner so far (2 arms)
BATCH_PROBES = 8  # grow x2 from the start until the throughput flattens or memory runs out (~4), narrow (~4)
BATCH_PROBE_SCALE = 4.0  # a probe's batch is on average ~4x the starting one: its steps cost ~4x
BATCH_VERIFY = 2  # the picked batch and the starting batch, each `repeats` times
LOADER_SWEEP = 5  # worker counts run once each, from the most this rank may use down to the first too slow (~5)
# Each pair runs both arms `repeats` times, interleaved: the sweep's pick against the next cheaper
# count, prefetch_factor 2/4, pin_memory off/on (CUDA only), the default start method/forkserver.
# Single loader runs of one setting varied +-20% on an H200 (ResNet-50, CPU augmentation:
# benchmarks/results/tune-bars-resnet50-h200-run2.json), so no pair is decided on one run each.
LOADER_PAIRS = 4
LOADER_TRIAL_S = 5.0  # a loader trial: ~3 s of the GPU's work plus worker start-up
EPOCH_START_S = 2.0  # persistent_workers off/on, `repeats` times each: workers start, one batch (no model)
SCALER_TRIALS = 3  # the probe, the default init_scale, the probe's choice
SCALER_STEPS = 30
DDP_TRIALS = 13  # 4 bucket sizes + 3 hook arms x 3 rounds
CONFIRM_ROUNDS = 3  # interleaved rounds of starting vs tuned
CONFIRM_TRIAL_S = 3.0  # each confirmation trial's steady window
COMPILE_S = 60.0  # torch.compile of a ResNet-50/GPT-2-sized model on first call: tens of seconds
SLACK = 1.5  # a stage may run this much past what it was given before it is stopped

VALUE_ORDER = ("precision", "batch", "loader", "scaler", "ddp")
# When the starting loader cannot feed the GPU, no other stage's gain reaches the training run
# (ResNet-50 on an H200, issue 17: fp16 measured 1.16x bf16 with the data on the device, 0.99x
# through the loader): the loader stage is kept first.
LOADER_BOUND_ORDER = ("loader", "precision", "batch", "scaler", "ddp")


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Stage:
    """One stage of the plan: ``need_s`` for ``trials``; ``given_s`` (0 when cut) and why cut."""

    name: str
    trials: int
    need_s: float
    given_s: float = 0.0
    cut: str = ""


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Plan:
    """Every stage in run order, the confirmation's reservation, and whether compile was cut;
    ``value_order`` keeps stages when the budget is short; ``sizing`` is what sized the stages
    (step time, set-up, steps), for :func:`replan`."""

    stages: tuple[Stage, ...]
    confirm_s: float
    budget_s: float | None
    compile_cut: bool = False
    value_order: tuple[str, ...] = VALUE_ORDER
    sizing: dict[str, Any] = dataclasses.field(default_factory=dict)

    def stage(self, name: str) -> Stage | None:
        return next((s for s in self.stages if s.name == name), None)

    def lines(self) -> list[str]:
        """The plan in words (stderr at the start, and the result's ``plan``)."""
        head = "no budget: every stage runs in full" if self.budget_s is None else f"budget {self.budget_s:g} s"
        out = [f"{head}; confirmation (tuned vs starting, {CONFIRM_ROUNDS} interleaved rounds) ~{self.confirm_s:.0f} s"]
        for s in self.stages:
            if s.cut:
                out.append(f"{s.name}: cut ({s.cut}); it needs ~{s.need_s:.0f} s for ~{s.trials} trials")
            else:
                out.append(f"{s.name}: ~{s.trials} trials, ~{s.need_s:.0f} s estimated, {s.given_s:.0f} s given")
        if self.compile_cut:
            out.append(f"precision: the torch.compile trial cut (it needs ~{COMPILE_S:.0f} s more)")
        return out


def trial_s(setup_s: float, step_s: float, steps: int) -> float:
    return setup_s + steps * step_s


def stage_needs(knobs: Sequence[str], *, step_s: float, setup_s: float, warmup: int, steps: int, repeats: int,
                cuda: bool, world_size: int, compile_trial: bool) -> dict[str, tuple[int, float]]:
    """``{stage: (trials, seconds)}`` for the knobs asked, at ``step_s`` per step."""
    full = trial_s(setup_s, step_s, warmup + steps)
    needs: dict[str, tuple[int, float]] = {}
    for name in knobs:
        if name == "precision":
            dtypes = DTYPE_TRIALS if cuda else 2  # tf32 and fp16 need CUDA
            # cudnn.benchmark and compile only on a GPU
            switches = (SWITCH_TRIALS if compile_trial else SWITCH_TRIALS - 1) if cuda else 1
            n = (dtypes + 2 * switches) * repeats
            needs[name] = (n, n * full + (COMPILE_S * repeats if cuda and compile_trial else 0.0))
        elif name == "batch":
            probe = trial_s(setup_s, step_s * BATCH_PROBE_SCALE, 3)
            n = BATCH_PROBES + BATCH_VERIFY * repeats
            needs[name] = (n, BATCH_PROBES * probe + BATCH_VERIFY * repeats * full)
        elif name == "loader":
            runs = LOADER_SWEEP + 2 * repeats * (LOADER_PAIRS if cuda else LOADER_PAIRS - 1)
            needs[name] = (runs, runs * (setup_s + LOADER_TRIAL_S) + 2 * repeats * EPOCH_START_S)
        elif name == "scaler":
            needs[name] = (SCALER_TRIALS, SCALER_TRIALS * trial_s(setup_s, step_s, SCALER_STEPS) if cuda else 0.0)
        elif name == "ddp":
            needs[name] = (DDP_TRIALS, DDP_TRIALS * full if world_size > 1 else 0.0)
    return needs


def confirm_need(setup_s: float) -> float:
    return 2 * CONFIRM_ROUNDS * (setup_s + CONFIRM_TRIAL_S + 2.0)  # +2 s: the loader's workers start


def _fit(knobs: Sequence[str], needs: dict[str, tuple[int, float]], left: float,
         value_order: Sequence[str] = VALUE_ORDER) -> tuple[Stage, ...]:
    """Keep the stages in order of value while ``left`` seconds hold them; share what is spare
    among the kept ones in proportion to their need; the rest are cut, with what they had."""
    kept: dict[str, float] = {}
    cut: dict[str, str] = {}
    for name in value_order:
        if name not in needs:
            continue
        need = needs[name][1]
        if need <= left:
            kept[name] = need
            left -= need
        else:
            cut[name] = f"the budget had {max(left, 0):.0f} s left for it"
    total = sum(kept.values())
    spare = max(left, 0.0)
    stages = []
    for name in knobs:
        trials, need = needs[name]
        if name in cut:
            stages.append(Stage(name=name, trials=trials, need_s=need, cut=cut[name]))
        else:
            share = spare * (need / total) if total > 0 else 0.0
            stages.append(Stage(name=name, trials=trials, need_s=need, given_s=need + share))
    return tuple(stages)


def measured_setup_s(trials: Sequence[Trial]) -> float | None:
    """The median set-up of the trials run so far (wall time minus their steps); the reference
    trial (``knob == "plan"``) is left out: its wall time holds the process's one-time costs."""
    setups = [t.wall_s - t.steps * t.step_ms / 1e3 for t in trials
              if t.knob != "plan" and t.verdict is TrialVerdict.OK and t.step_ms and t.steps and t.wall_s]
    return max(0.2, statistics.median(setups)) if setups else None


def replan(plan: Plan, remaining: Sequence[str], elapsed_s: float, *, setup_s: float | None = None) -> Plan:
    """The plan again before a later stage, over the stages not yet run: the seconds actually left
    (budget minus ``elapsed_s``, minus the confirmation's reservation) and, when given, the set-up
    time the trials so far measured (the reference trial's includes one-time costs: CUDA context,
    the first cuDNN autotuning) re-size the remaining stages and the confirmation. A stage that
    finished early gives its time to the later ones; a stage cut at the start runs when the time it
    needs is now there. Stages already run keep their entries."""
    if plan.budget_s is None:
        return plan
    needs = {s.name: (s.trials, s.need_s) for s in plan.stages if s.name in remaining}
    confirm_s = plan.confirm_s
    if setup_s is not None and plan.sizing:
        sizing = {**plan.sizing, "setup_s": setup_s}
        compile_trial = sizing.pop("compile_trial", False)
        needs = stage_needs(list(needs), compile_trial=compile_trial and not plan.compile_cut, **sizing)
        confirm_s = confirm_need(setup_s)
    left = plan.budget_s - elapsed_s - confirm_s
    fresh = {s.name: s for s in _fit([n for n in remaining if n in needs], needs, left, plan.value_order)}
    stages = tuple(fresh.get(s.name, s) for s in plan.stages)
    return dataclasses.replace(plan, stages=stages, confirm_s=confirm_s)


def make_plan(knobs: Sequence[str], budget_s: float | None, *, step_s: float, setup_s: float, warmup: int,
              steps: int, repeats: int, cuda: bool, world_size: int = 1, compile_trial: bool = True,
              spent_s: float = 0.0, loader_bound: bool = False) -> Plan:
    """Fit the stages into ``budget_s`` (``spent_s`` already used by the reference trial); with
    ``loader_bound`` (the starting loader cannot feed the GPU) the loader stage is kept first."""
    kw = dict(step_s=step_s, setup_s=setup_s, warmup=warmup, steps=steps, repeats=repeats, cuda=cuda,
              world_size=world_size)
    order = LOADER_BOUND_ORDER if loader_bound else VALUE_ORDER
    sizing = {**kw, "compile_trial": compile_trial}
    needs = stage_needs(knobs, compile_trial=compile_trial, **kw)
    confirm_s = confirm_need(setup_s)
    if budget_s is None:
        stages = tuple(Stage(name=k, trials=needs[k][0], need_s=needs[k][1], given_s=math.inf) for k in knobs)
        return Plan(stages=stages, confirm_s=confirm_s, budget_s=None, value_order=order, sizing=sizing)
    left = budget_s - spent_s - confirm_s
    compile_cut = False
    precision = needs.get("precision")
    before = sum(needs[n][1] for n in order[:order.index("precision")] if n in needs)
    if precision and compile_trial and cuda and precision[1] > left - before:
        lighter = stage_needs(["precision"], compile_trial=False, **kw)["precision"]
        if lighter[1] <= left - before:
            needs["precision"], compile_cut = lighter, True
    stages = _fit(knobs, needs, left, order)
    return Plan(stages=stages, confirm_s=confirm_s, budget_s=budget_s, compile_cut=compile_cut, value_order=order,
                sizing=sizing)
