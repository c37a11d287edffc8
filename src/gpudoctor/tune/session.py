"""The tuning session: the knobs in order, the budget plan, the confirmation, rank agreement and Ctrl-C.

``tune(["all"], target_ref="mytrain:target")`` first measures the starting configuration (the
reference trial: its step time and set-up time size every later trial and the budget plan,
:mod:`.plan`), then runs precision -> batch -> loader -> scaler -> ddp (each knob starts from what
the previous ones chose), then confirms (:mod:`.confirm`): the tuned configuration runs against the
starting one, interleaved and repeated, and is written only when it is faster beyond the noise
(else the longest part of it that is: :func:`~gpudoctor.tune.confirm.fallbacks`).
A stage that runs out of its budget keeps its starting values. Every setting is measured
``repeats`` times, interleaved with what it is compared against, and wins only beyond the noise
(:mod:`.noise`). When the starting loader cannot feed the GPU the loader stage runs first (no other
stage's gain reaches training past it); the plan is made again before each later stage. Ctrl-C
ends the session at once, keeps the trials finished so far and writes nothing (the confirmation
did not run). Under torchrun every rank runs the per-rank trials on its own GPU; the batch is agreed by an all-reduce
MIN (the smallest GPU decides), the other knobs by rank 0's choice, so every rank writes and
trains with the same settings. The session joins torchrun's process group if none exists and
leaves it at the end; a group the caller created stays (the caller may still need it).
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from gpudoctor.records.tune import KnobResult, Trial, TrialVerdict, TuneResult
from gpudoctor.tune.noise import Measured, rotated, summarize
from gpudoctor.tune.plan import Plan, measured_setup_s, replan
from gpudoctor.tune.target import LoaderSettings, TuneTarget, load_target
from gpudoctor.tune.trials import TrialRunner, TrialSpec

KNOBS = ("precision", "batch", "loader", "scaler", "ddp")
# The default budget: by the plan's estimate (tests/unit/tune/test_noise_plan.py), `tune all` on ResNet-50
# (batch 256, 160 px, bf16: ~31 ms a step) and GPT-2 124M (16 x 1024 tokens, bf16: ~60 ms a step) on one
# H200 needs ~490-500 s at 3 s set-up a trial (compile trial; the loader's pairs repeated: ~176 s of it).
DEFAULT_BUDGET_S = 510.0


class BudgetSpent(Exception):
    """The session's time budget ran out; the knob keeps what it measured."""


@dataclasses.dataclass(frozen=True, kw_only=True)
class TuneOptions:
    """How hard to search.

    Attributes:
        max_batch: never try a per-device batch above this (``None``: dataset, host RAM and the
            65535 launch-dimension cap only).
        margin: safety margin below the largest batch that fit (0.05 = 5% headroom).
        budget_s: the whole session's time budget (``None``: no limit); planned per stage.
        warmup: steps before measuring, per trial (past cuDNN autotuning, compile, allocator growth).
        steps: the fewest measured steps per trial; more when ``window_s`` needs them.
        window_s: the least time a trial's measured steps should last (from the reference
            trial's step time): short windows measure noise.
        repeats: runs of each setting, interleaved with what it is compared against.
        tolerance: throughput differences below this fraction (or below the settings' spread,
            when larger) count as noise: the starting value stays.
        isolation: ``auto``, ``inline`` or ``process`` (see :class:`TrialRunner`).
        compile: include the ``torch.compile`` trial (GPU only).
        batch_pick: ``knee`` (write the batch where the throughput curve flattens) or ``max``
            (write the largest safe batch).
    """

    max_batch: int | None = None
    margin: float = 0.05
    budget_s: float | None = DEFAULT_BUDGET_S
    warmup: int = 5
    steps: int = 10
    window_s: float = 1.0
    repeats: int = 2
    tolerance: float = 0.03
    isolation: str = "auto"
    compile: bool = True
    batch_pick: str = "knee"

    def __post_init__(self) -> None:
        if self.batch_pick not in ("knee", "max"):
            raise ValueError(f"--pick-batch {self.batch_pick!r}: use knee or max")
        if self.max_batch is not None and self.max_batch < 1:
            raise ValueError(f"--max-batch {self.max_batch}: must be at least 1")
        if not 0 <= self.margin < 1:
            raise ValueError(f"--margin {self.margin}: must be in [0, 1), e.g. 0.05")
        if self.budget_s is not None and self.budget_s <= 0:
            raise ValueError(f"--budget-s {self.budget_s}: must be > 0 seconds")
        if self.steps < 2 or self.warmup < 0:
            raise ValueError("steps must be >= 2 and warmup >= 0")
        if self.repeats < 1:
            raise ValueError(f"--repeats {self.repeats}: must be at least 1 (2 or more show the spread)")


class TuneContext:
    """What the knobs share: the runner, the settings chosen so far, the budget and the ranks."""

    def __init__(self, target: TuneTarget, runner: TrialRunner, options: TuneOptions, *, device: Any,
                 rank: int = 0, world_size: int = 1) -> None:
        self.target, self.runner, self.options = target, runner, options
        self.config = target.config
        self.loader: LoaderSettings = target.loader
        self.device = device
        self.cuda = device.type == "cuda"
        self.rank, self.world_size = rank, world_size
        self.started = time.perf_counter()
        self.consumption_rate: float | None = None  # samples/s per rank with the data already on the GPU
        self.flops_per_sample: float | None = None
        self.trials: list[Trial] = []
        self.on_trial: Callable[[Trial], None] = lambda trial: None
        self.on_run: Callable[[], None] = lambda: None  # every run, repeats included (the spinner)
        self.steps = options.steps  # measured steps per trial, set from the reference trial
        self.reserve_s = 0.0  # kept for the confirmation
        self.stage_started = self.started
        self.stage_given = float("inf")
        self.confirming = False  # the confirmation is reserved in the plan: it never stops for the budget
        self.compile_cut = False  # the plan cut the torch.compile trial
        self.reference_rate: float | None = None  # the starting configuration's samples/s (data on the device)
        self.fed_rate: float | None = None  # samples/s through the loader training uses (its best so far)
        self.fed_knobs: set[str] = set()  # the knobs that ran a trial through the real DataLoader

    # -- budget
    def elapsed(self) -> float:
        return time.perf_counter() - self.started

    def begin_stage(self, given_s: float) -> None:
        from gpudoctor.tune.plan import SLACK

        self.stage_started, self.stage_given = time.perf_counter(), given_s * SLACK

    def out_of_time(self) -> bool:
        """The session's budget (less the confirmation's reserve) or the stage's share is spent."""
        if self.confirming:
            return False
        budget = self.options.budget_s
        spent = budget is not None and self.elapsed() >= budget - self.reserve_s
        spent = spent or time.perf_counter() - self.stage_started >= self.stage_given
        return bool(self.agree(spent)) if self.world_size > 1 else spent

    # -- trials
    @property
    def batch_size(self) -> int:
        size = self.config.batch_size or 32
        return max(1, min(size, len(self.target.train_dataset) // self.world_size))

    def trial_config(self, config: Any = None, *, strategy: str = "none") -> dict[str, Any]:
        """The config a trial runs: no OOM recovery (an OOM must surface: it is the batch search's
        answer, so no OOM snapshot files either), stop on a NaN loss, no checkpoints, no progress
        bar, one process per GPU unless DDP is what is measured."""
        from gpudoctor.train.config import CheckpointConfig, LogConfig, RobustConfig

        cfg = config or self.config
        cfg = cfg.replace(
            robust=RobustConfig(oom_recover=False, oom_snapshot="off",
                                nonfinite="stop" if cfg.robust.nonfinite == "skip" else cfg.robust.nonfinite),
            checkpoint=CheckpointConfig(),
            log=LogConfig(progress_bar=False, every_steps=10_000, flops_per_sample=self.flops_per_sample),
            parallel=dataclasses.replace(cfg.parallel, strategy=strategy),
            lr_scaling="none",
        )
        return cfg.to_dict()

    def spec(self, knob: str, setting: str, params: dict[str, Any], *, config: Any = None, mode: str = "train",
             batch_size: int | None = None, loader: LoaderSettings | None = None, strategy: str = "none",
             warmup: int | None = None, steps: int | None = None) -> TrialSpec:
        return TrialSpec(knob=knob, setting=setting, params=params, config=self.trial_config(config, strategy=strategy),
                         loader=(loader or self.loader).to_dict(), mode=mode,
                         batch_size=batch_size or self.batch_size,
                         warmup=self.options.warmup if warmup is None else warmup,
                         steps=self.steps if steps is None else steps)

    def run(self, spec: TrialSpec, *, record: bool = True) -> Trial:
        """Run one trial (raises :class:`BudgetSpent` instead when the budget is gone).

        Under torchrun the budget is checked only between knobs (an agreed decision): ranks search
        on their own here, and one rank leaving a knob early would mismatch the collectives."""
        if self.world_size == 1 and self.out_of_time():
            raise BudgetSpent()
        if spec.mode == "loader":
            self.fed_knobs.add(spec.knob)
        trial = self.runner.run(spec)
        self.on_run()
        if record:
            self.trials.append(trial)
            self.on_trial(trial)
        return trial

    def measure(self, specs: list[TrialSpec], *, repeats: int | None = None) -> list[Trial]:
        """Each spec ``repeats`` times, interleaved (round r starts at spec r), one row per spec:
        the median run's figures, every run's rate and their spread. A spec that fails once is
        failed (its failing run is the row) and is not run again."""
        repeats = self.options.repeats if repeats is None else repeats
        runs: list[list[Trial]] = [[] for _ in specs]
        for r in range(repeats):
            for i in rotated(list(range(len(specs))), r):
                if runs[i] and runs[i][-1].verdict is not TrialVerdict.OK:
                    continue
                runs[i].append(self.run(specs[i], record=False))
        rows = [aggregate(arm) for arm in runs]
        for row in rows:
            self.trials.append(row)
            self.on_trial(row)
        return rows

    def skip(self, knob: str, setting: str, params: dict[str, Any], reason: str) -> Trial:
        trial = Trial(knob=knob, setting=setting, params=params, verdict=TrialVerdict.SKIPPED, reason=reason)
        self.trials.append(trial)
        self.on_trial(trial)
        return trial

    # -- ranks
    def agree(self, value: Any) -> Any:
        """Rank 0's ``value`` on every rank (a collective; identity for one process)."""
        if self.world_size == 1:
            return value
        import torch.distributed as dist

        box = [value]
        dist.broadcast_object_list(box, src=0)
        return box[0]

    def agree_min(self, value: int) -> int:
        """The smallest ``value`` over the ranks (all-reduce MIN: a collective and a host sync)."""
        if self.world_size == 1:
            return value
        import torch
        import torch.distributed as dist

        t = torch.tensor([value], dtype=torch.int64, device=self.device if self.cuda else "cpu")
        dist.all_reduce(t, op=dist.ReduceOp.MIN)
        return int(t.item())  # SYNC

    def gather(self, value: Any) -> list[Any]:
        if self.world_size == 1:
            return [value]
        import torch.distributed as dist

        out: list[Any] = [None] * self.world_size
        dist.all_gather_object(out, value)
        return out


def measured(trial: Trial) -> Measured | None:
    """A row's runs as :class:`~gpudoctor.tune.noise.Measured` (``None`` unless it ran cleanly)."""
    if trial.verdict is not TrialVerdict.OK or not trial.samples_per_s:
        return None
    return summarize(trial.rates or (trial.samples_per_s,))


def aggregate(runs: list[Trial]) -> Trial:
    """One row for a setting's runs: a failed run if any, else the median run with every rate."""
    failed = next((t for t in runs if t.verdict is not TrialVerdict.OK), None)
    if failed is not None or len(runs) == 1:
        return failed or runs[0]
    measured = summarize([t.samples_per_s for t in runs])
    if measured is None:
        return runs[0]
    middle = sorted(runs, key=lambda t: t.samples_per_s or 0.0)[(len(runs) - 1) // 2]
    return dataclasses.replace(middle, samples_per_s=measured.median, rates=measured.rates, spread=measured.spread,
                               wall_s=sum(t.wall_s for t in runs))


def _count_flops(target: TuneTarget, runner: TrialRunner) -> float | None:
    """FLOPs of one sample's forward+backward, counted once on a 2-sample CPU batch (so the trials
    need not count them again at every batch size)."""
    try:
        from gpudoctor.train.loop import default_unpack
        from gpudoctor.train.metrics import count_flops

        model = target.model_factory()
        inputs, labels = (target.unpack or default_unpack)(runner.pools()["train"].batch(2))

        def step() -> None:
            target.loss_fn(model(inputs), labels).backward()

        return count_flops(step) / 2 or None
    except Exception:  # noqa: BLE001 - optional: the engine counts them itself when this fails
        return None


def _device_name(device: Any) -> str:
    if device.type == "cuda":
        import torch

        return f"{device} ({torch.cuda.get_device_name(device)})"
    return str(device)


def _replan(ctx: TuneContext, plan: Plan, remaining: list[str], say: Callable[[str], None]) -> Plan:
    fresh = ctx.agree(replan(plan, remaining, ctx.elapsed(), setup_s=measured_setup_s(ctx.trials)))
    for stage in fresh.stages:
        before = plan.stage(stage.name)
        if stage.name in remaining and before is not None and before.cut and not stage.cut:
            say(f"plan: {stage.name}: runs after all (the trials so far took less than planned): "
                f"{stage.given_s:.0f} s given")
    return fresh


def tune(knobs: list[str], *, target_ref: str, target: TuneTarget | None = None, options: TuneOptions | None = None,
         out: str | Path | None = None, on_trial: Callable[[Trial], None] | None = None,
         on_knob: Callable[[str], None] | None = None, on_say: Callable[[str], None] | None = None,
         on_run: Callable[[], None] | None = None) -> TuneResult:
    """Tune ``knobs`` (names from :data:`KNOBS`, or ``all``) of the target; confirm; write the config
    to ``out`` (rank 0) when it beat the starting one, and return every trial. ``on_say`` gets the
    plan and each stage's progress in words (stderr). Ctrl-C returns the trials finished so far."""
    from gpudoctor.core.device import select_device
    from gpudoctor.core.dist import dist_env, init_distributed
    from gpudoctor.tune import batch, confirm, ddp, loader, precision, scaler

    options = options or TuneOptions()
    say = on_say or (lambda message: None)
    on_knob = on_knob or (lambda name: None)
    order = list(KNOBS) if "all" in knobs else [k for k in KNOBS if k in knobs]
    target = target or load_target(target_ref)
    env = dist_env()
    device = select_device(target.config.device, env)
    # under torchrun: join the group once, before any trial (a caller's group is the caller's to end)
    owns_group = init_distributed(env, device)
    isolation = "inline" if env.world_size > 1 and options.isolation == "auto" else options.isolation
    runner = TrialRunner(target, target_ref, isolation=isolation)
    ctx = TuneContext(target, runner, options, device=device, rank=env.rank, world_size=env.world_size)
    ctx.on_trial, ctx.on_run = on_trial or ctx.on_trial, on_run or ctx.on_run
    tuners = {"precision": precision.tune_precision, "batch": batch.tune_batch, "loader": loader.tune_loader,
              "scaler": scaler.tune_scaler, "ddp": ddp.tune_ddp}
    results: list[KnobResult] = []
    steps: list[confirm.Step] = []  # the stages that changed the configuration, in the order they ran
    interrupted, plan = False, None
    start_config, start_loader = ctx.config, ctx.loader
    try:
        on_knob("plan")
        ctx.flops_per_sample = _count_flops(target, runner) if ctx.cuda else None
        reference, plan = confirm.reference(ctx, order)
        if plan.value_order[0] == "loader":  # loader-bound: tuned first, what it leaves goes to the rest
            order = [name for name in plan.value_order if name in order]
        results.append(reference)
        for line in plan.lines():
            say(f"plan: {line}")
        queue, deferred, turns = list(order), set(), 0
        while queue:
            name, turns = queue.pop(0), turns + 1
            if turns > 1 and plan.budget_s is not None:  # time an earlier stage left unused goes to later ones
                plan = _replan(ctx, plan, [name, *queue], say)
            stage = plan.stage(name)
            first = len(ctx.trials)
            if stage is not None and stage.cut and queue and name not in deferred:
                # sized before any stage's trial measured the set-up: once the others have run, again
                deferred.add(name)
                queue.append(name)
                say(f"plan: {name}: deferred to the end ({stage.cut}; needs ~{stage.need_s:.0f} s as estimated "
                    "before any trial): sized again once the other stages have measured their trials")
                continue
            if stage is not None and stage.cut:
                results.append(KnobResult(knob=name, summary=f"cut by the budget plan ({stage.cut}); it needs "
                                          f"~{stage.need_s:.0f} s for ~{stage.trials} trials: raise --budget-s"))
                say(f"{name}: cut ({stage.cut}; needs ~{stage.need_s:.0f} s)")
                continue
            on_knob(name)
            given = stage.given_s if stage is not None else float("inf")
            say(f"tuning {name} (~{stage.trials if stage else '?'} trials, {given:.0f} s given) ...")
            ctx.begin_stage(given)
            kept_config, kept_loader = ctx.config, ctx.loader
            if ctx.world_size > 1 and ctx.out_of_time():  # agreed: every rank skips the same knobs
                results.append(KnobResult(knob=name, summary="time budget spent; not tuned (starting values kept)"))
                continue
            try:
                results.append(tuners[name](ctx))
            except BudgetSpent:
                ctx.config, ctx.loader = kept_config, kept_loader  # never half a stage: its starting values
                results.append(KnobResult(knob=name, trials=tuple(ctx.trials[first:]),
                                          summary=f"budget spent before {name} finished: its starting values kept"))
            if (ctx.config, ctx.loader) != (kept_config, kept_loader):
                steps.append(confirm.Step(name=name, config=ctx.config, loader=ctx.loader, fed=name in ctx.fed_knobs))
            say(f"{name}: done in {time.perf_counter() - ctx.stage_started:.0f} s ({results[-1].summary})")
        ctx.begin_stage(float("inf"))
        on_knob("confirm")
        checked = confirm.confirm(ctx, start_config, start_loader, steps, say)
        results.extend(checked.results)
    except KeyboardInterrupt:
        interrupted = True
        done = {k.knob for k in results}
        current = next((k for k in ["plan", *order, "confirm", "fallback"] if k not in done), "fallback")
        results.append(KnobResult(knob=current, trials=tuple(t for t in ctx.trials if t.knob == current),
                                  summary="interrupted (Ctrl-C); the trials above finished; nothing written"))
        checked = None
    if owns_group:
        from gpudoctor.core.dist import destroy_distributed

        destroy_distributed(synchronize=not interrupted)  # after Ctrl-C the ranks may stand at different trials
    config_path = loader_path = None
    keep = checked is not None and checked.write
    if out is not None and ctx.rank == 0 and keep:
        from gpudoctor.tune.target import write_outputs

        written = write_outputs(ctx.config, ctx.loader, out)
        config_path, loader_path = str(written[0]), str(written[1])
    final_config, final_loader = (ctx.config, ctx.loader) if keep else (start_config, start_loader)
    return TuneResult(target=target_ref, device=_device_name(device), world_size=env.world_size, knobs=tuple(results),
                      config=final_config.to_dict(), loader=final_loader.to_dict(), config_path=config_path,
                      loader_path=loader_path, elapsed_s=ctx.elapsed(), interrupted=interrupted,
                      plan=tuple(plan.lines()) if plan is not None else (),
                      kept_start=checked is not None and not checked.write)
