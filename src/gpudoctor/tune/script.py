"""Tuning a plain script: what ``gpudoctor run`` prescribes, tried through the ``run --try`` injection.

Every trial is one ``run_instrumented`` child (the ``run --try`` machinery: knobs ride in through
``GPUDOCTOR_KNOBS``, the probes record each optimizer step), so trials are isolated by
construction. The candidates are knob *names* (:data:`PRECISION_KNOBS`, :data:`LOADER_KNOBS`),
checked at run time with :func:`gpudoctor.collectors.knobs.parse_knobs`: a name this gpudoctor's
``--try`` does not know is listed as skipped, so a knob added there is tried here without a change.

1. The reference run (the script as written) gives the step time; every later run warms up for
   at least :data:`WARM_S` (cuDNN autotuning, compile, workers started) and measures at least
   ``window_s`` of steps. The budget plan is made from it.
   When that run waits for data for :data:`LOADER_FIRST_SHARE` of its step or more, the loader
   stage (3) runs before the precision stage, and precision is compared with the loader it chose.
2. Precision, with the loader as generous as this machine allows (so the GPU's own speed is
   compared, as the engine's trials do with the data on the GPU): the dtype (as written, bf16,
   fp16 autocast, bf16 with channels_last), then each switch on top of the winner (tf32 while
   fp32, channels_last, cudnn_benchmark, compile), every arm repeated and interleaved; a switch
   is kept when it beats the winner beyond the noise.
3. The loader: as written against fewer and more workers (pinned, persistent), at the chosen
   precision; the cheapest that is not slower beyond the noise.
4. The confirmation: the script as written against the chosen ``--try`` spec, interleaved over
   three rounds; offered only when faster beyond the noise (a machine too noisy to tell is named).
Each child's output goes to its run directory's ``stdout.log``, never to the table. The run
directories are removed at the end, unless a trial failed or the session was interrupted: then
the folder is kept and named in the result. Ctrl-C stops the running child (its traceback stays
in its log) and keeps the trials that finished. The batch size, the GradScaler and DDP are in the
script's own code: those knobs need ``--target`` and are reported as skipped.
"""

from __future__ import annotations

import math
import os
import shutil
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from gpudoctor.analysis.steps import stats_past_warmup
from gpudoctor.records.tune import KnobResult, Trial, TrialVerdict, TuneResult
from gpudoctor.tune.noise import beats, compare, pick, rotated, too_noisy
from gpudoctor.tune.session import aggregate, measured

SCRIPT_KNOBS = ("loader", "precision")
PRECISION_KNOBS = ("bf16", "fp16")  # autocast dtypes, cheapest first
SWITCH_KNOBS = ("tf32", "channels_last", "cudnn_benchmark", "compile")
LOADER_KNOBS = ("pin_memory", "persistent_workers", "non_blocking")  # added to every num_workers arm
CUDA_ONLY = {"tf32", "cudnn_benchmark", "fp16", "compile", "pin_memory", "non_blocking"}
LOADER_FIRST_SHARE = 0.3  # data wait share of the reference step past which the loader goes first
WARM_S = 3.0  # warm-up per run: past cuDNN autotuning, compile and the workers' start
CONFIRM_ROUNDS = 3
_SKIP_WHY = {
    "batch": "the batch size is set in the script's code; tune it with --target module:function",
    "scaler": "the GradScaler is created in the script's code; tune it with --target module:function",
    "ddp": "DDP is set up in the script's code; tune it with --target module:function under torchrun",
}


def _cuda() -> bool:
    import torch

    return torch.cuda.is_available()


def available(name: str) -> str | None:
    """``None`` when ``run --try`` knows the knob spec ``name``, else why not."""
    from gpudoctor.collectors.knobs import parse_knobs
    from gpudoctor.errors import GpuDoctorUserError

    try:
        parse_knobs(name)
    except GpuDoctorUserError as exc:
        return f"this gpudoctor's --try cannot inject it ({exc})"
    return None


def measure(command: tuple[str, ...], knobs: str, run_dir: Path, *, steps: int, warmup: int, knob: str,
            setting: str, params: dict, first_step_timeout_s: float = 300.0) -> Trial:
    """One fresh run of the script with ``knobs`` (a ``--try`` spec, "" for none), measured past
    its warm-up: samples over the steady steps' total time (a loader that stalls every few steps
    counts). The child's output goes to ``run_dir/stdout.log`` only."""
    from gpudoctor.collectors.knobs import parse_knobs
    from gpudoctor.collectors.launch import RunSpec, run_instrumented
    from gpudoctor.records.rundir import read_steps

    started = time.perf_counter()
    spec = RunSpec(command=command, run_dir=run_dir, steps=warmup + steps, profile=False,
                   knobs=parse_knobs(knobs) if knobs else (), child_stdout_to_stderr=True, echo_child=False,
                   sample_gpu=False, first_step_timeout_s=first_step_timeout_s)
    outcome = run_instrumented(spec, say=lambda message: None)
    status = outcome.manifest.status
    base = dict(knob=knob, setting=setting, params=params, wall_s=time.perf_counter() - started)
    if status == "interrupted":
        raise KeyboardInterrupt
    path = run_dir / "steps-rank0.jsonl"
    records = read_steps(path) if path.exists() else []
    if status not in ("stopped", "completed"):
        why = outcome.manifest.error or outcome.message or status
        verdict = TrialVerdict.OOM if "OutOfMemoryError" in why else TrialVerdict.FAILED
        return Trial(**base, verdict=verdict, steps=len(records),
                     reason=f"{status}: {why.splitlines()[-1] if why else ''} (log: {run_dir / 'stdout.log'})"[:300])
    if len(records) - warmup < 2:
        return Trial(**base, verdict=TrialVerdict.FAILED, steps=len(records),
                     reason=f"only {len(records)} steps recorded: the trial did not really execute")
    stats = stats_past_warmup(records, warmup)
    assert stats is not None  # records is not empty
    losses = [r.loss for r in sorted(records, key=lambda r: r.step)[warmup:] if r.loss is not None]
    return Trial(**base, verdict=TrialVerdict.OK, steps=len(records), step_ms=stats.mean_step_ms,
                 samples_per_s=stats.samples_per_s, data_wait_ms=stats.mean_data_wait_ms,
                 peak_mem_bytes=_peak(records), loss=losses[-1] if losses else None)


def _peak(records: list) -> int | None:
    """The largest allocator peak of any step, warm-up included (the trial's memory need)."""
    return max((r.mem.peak_allocated_bytes for r in records if r.mem is not None), default=None)


class _Session:
    """The runs of one script session: sizes, budget, interleaved repeats, the table's rows."""

    def __init__(self, command: tuple[str, ...], base_dir: Path, *, repeats: int, window_s: float, min_steps: int,
                 budget_s: float | None, on_trial: Callable[[Trial], None], on_run: Callable[[], None]) -> None:
        self.command, self.base_dir, self.repeats = command, base_dir, repeats
        self.window_s, self.min_steps, self.budget_s = window_s, min_steps, budget_s
        self.on_trial, self.on_run = on_trial, on_run
        self.started = time.perf_counter()
        self.counter = 0
        self.warmup, self.steps = 10, max(min_steps, 20)
        self.run_s = 0.0  # what one run costs (set from the reference)
        self.failed = False

    def elapsed(self) -> float:
        return time.perf_counter() - self.started

    def one(self, knob: str, spec: str, setting: str, params: dict) -> Trial:
        self.counter += 1
        run_dir = self.base_dir / f"{self.counter:03d}-{knob.split(':')[-1]}"
        trial = measure(self.command, spec, run_dir, steps=self.steps, warmup=self.warmup, knob=knob,
                        setting=setting, params=params)
        self.failed = self.failed or trial.verdict is not TrialVerdict.OK
        self.on_run()
        return trial

    def size_from(self, reference: Trial) -> None:
        """Warm-up and window from the reference run's step time."""
        if reference.verdict is not TrialVerdict.OK or not reference.step_ms:
            return
        step_s = reference.step_ms / 1e3
        self.warmup = max(10, math.ceil(WARM_S / step_s))
        self.steps = max(self.min_steps, math.ceil(self.window_s / step_s))
        setup = max(1.0, reference.wall_s - (self.warmup + self.steps) * step_s)
        self.run_s = setup + (self.warmup + self.steps) * step_s

    def affordable(self, runs: int, extra_s: float = 0.0, reserve_s: float = 0.0) -> bool:
        if self.budget_s is None:
            return True
        return self.elapsed() + runs * self.run_s + extra_s + reserve_s <= self.budget_s

    def arms(self, knob: str, arms: list[tuple[str, str, dict]], rounds: int | None = None) -> list[Trial]:
        """Every arm (spec, setting, params) ``rounds`` times, interleaved; one row per arm."""
        runs: list[list[Trial]] = [[] for _ in arms]
        for r in range(rounds or self.repeats):
            for i in rotated(list(range(len(arms))), r):
                if runs[i] and runs[i][-1].verdict is not TrialVerdict.OK:
                    continue
                runs[i].append(self.one(knob, *arms[i]))
        rows = [aggregate(arm) for arm in runs]
        for row in rows:
            self.on_trial(row)
        return rows


def _join(*parts: str) -> str:
    return ",".join(p for p in parts if p)


def tune_script(knobs: list[str], command: tuple[str, ...], *, steps: int | None = None, warmup: int | None = None,
                min_steps: int = 10, window_s: float = 3.0, repeats: int = 2, tolerance: float = 0.03,
                budget_s: float | None = None, compile_trial: bool = True, worker_counts: tuple[int, ...] | None = None,
                on_trial: Callable[[Trial], None] | None = None, on_knob: Callable[[str], None] | None = None,
                on_say: Callable[[str], None] | None = None, on_run: Callable[[], None] | None = None,
                work_dir: Path | None = None) -> TuneResult:
    """Try the knobs ``run`` prescribes on a plain script; the result is a ``--try`` spec.

    ``steps``/``warmup`` fix every run's length (tests); by default they follow the reference
    run's step time (``window_s`` measured, :data:`WARM_S` of warm-up)."""
    on_trial = on_trial or (lambda trial: None)
    say = on_say or (lambda message: None)
    knob_cb = on_knob or (lambda name: None)
    order = ["precision", "batch", "loader", "scaler", "ddp"] if "all" in knobs else knobs
    owned = work_dir is None
    base_dir = Path(work_dir or tempfile.mkdtemp(prefix="gpudoctor-tune-"))
    s = _Session(command, base_dir, repeats=repeats, window_s=window_s, min_steps=min_steps, budget_s=budget_s,
                 on_trial=on_trial, on_run=on_run or (lambda: None))
    cuda = _cuda()
    results: list[KnobResult] = []
    trials_of: dict[str, list[Trial]] = {}
    chosen: dict[str, str] = {"precision": "", "loader": ""}
    interrupted = False
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    counts = worker_counts or tuple(sorted({max(1, cpus // 4), max(1, cpus // 2), min(cpus, 16)}))

    def usable(name: str) -> str | None:
        if not cuda and name in CUDA_ONLY:
            return "needs a CUDA GPU"
        return available(name)

    def loader_spec(workers: int) -> str:
        extras = [k for k in LOADER_KNOBS if usable(k) is None]
        return _join(f"num_workers={workers}", *extras)

    generous = loader_spec(max(counts)) if "loader" in order or "precision" in order else ""

    def skip(knob: str, setting: str, why: str) -> None:
        row = Trial(knob=knob, setting=setting, params={}, verdict=TrialVerdict.SKIPPED, reason=why)
        trials_of.setdefault(knob, []).append(row)
        on_trial(row)

    def stage(knob: str, arms: list[tuple[str, str, dict]], base: int = 0) -> tuple[int | None, str, list[Trial]]:
        rows = s.arms(knob, arms)
        trials_of.setdefault(knob, []).extend(rows)
        won, why = pick([measured(r) for r in rows], base=base, tolerance=tolerance)
        return won, why, rows

    try:
        knob_cb("plan")
        if steps is not None:
            s.steps, s.warmup = steps, warmup if warmup is not None else 5
            reference = s.arms("script:plan", [("", "as written (reference)", {})], rounds=1)[0]
        else:
            reference = s.arms("script:plan", [("", "as written (reference)", {})], rounds=1)[0]
            s.size_from(reference)
        results.append(KnobResult(knob="script:plan", trials=(reference,), summary=(
            f"each run: {s.warmup} warm-up steps then {s.steps} measured, {repeats} runs of each setting "
            f"interleaved; ~{s.run_s:.0f} s a run" if s.run_s else "the script as written, once")))
        confirm_reserve = 2 * CONFIRM_ROUNDS * s.run_s
        order = _loader_first(order, reference, say)
        say(f"plan: ~{s.run_s:.0f} s a run, {s.warmup}+{s.steps} steps; confirmation reserved ~{confirm_reserve:.0f} s")
        for knob in order:
            if knob in _SKIP_WHY:
                results.append(KnobResult(knob=knob, summary=f"skipped: {_SKIP_WHY[knob]}"))
                continue
            if knob not in SCRIPT_KNOBS:
                continue
            name = f"script:{knob}"
            knob_cb(knob)
            say(f"tuning {knob} ...")
            if knob == "precision":
                results.append(_precision(s, stage, skip, usable, chosen, chosen["loader"] or generous,
                                          compile_trial, confirm_reserve, trials_of, tolerance))
            else:
                results.append(_loader(s, stage, chosen, counts, loader_spec, confirm_reserve, trials_of))
            say(f"{knob}: {results[-1].summary}")
        knob_cb("confirm")
        final = _join(chosen["precision"], chosen["loader"])
        if final:
            rows = s.arms("script:confirm", [("", "as written", {}), (final, f"--try {final}", {})],
                          rounds=max(CONFIRM_ROUNDS, repeats))
            start, tuned = measured(rows[0]), measured(rows[1])
            gain, margin = compare(tuned, start, tolerance) if tuned and start else (0.0, tolerance)
            if beats(tuned, start, tolerance):
                figures = f"{gain:.2f}x round by round" if start else "the script as written failed"
                summary = (f"gpudoctor run --try {final} -- {' '.join(command)}  ({figures}, beyond the "
                           f"+-{margin:.0%} noise)")
            else:
                tip = f"; {too_noisy(margin)}" if gain >= 1 - margin and too_noisy(margin) else ""
                gain = f"{gain:.2f}x" if tuned and start else "failed"
                summary = f"keep the script as it is: --try {final} measured {gain}, not faster beyond the noise{tip}"
                final = ""
            results.append(KnobResult(knob="script:result", trials=tuple(rows), summary=summary,
                                      winner=rows[1 if final else 0].setting))
        else:
            results.append(KnobResult(knob="script:result", summary="keep the script as it is: no knob beat it"))
    except KeyboardInterrupt:
        interrupted = True
        for knob, rows in trials_of.items():
            if not any(k.knob == knob for k in results):
                results.append(KnobResult(knob=knob, trials=tuple(rows), summary="interrupted (Ctrl-C)"))
        final = ""
    kept = interrupted or s.failed or not owned
    if not kept:
        shutil.rmtree(base_dir, ignore_errors=True)
    return TuneResult(target=" ".join(command), device="script", knobs=tuple(results),
                      elapsed_s=s.elapsed(), interrupted=interrupted, loader={"try": final},
                      run_dirs=str(base_dir) if kept else None)


def _loader_first(order: list[str], reference: Trial, say: Callable[[str], None]) -> list[str]:
    """Tune the loader before the precision when the script as written waits for data.

    A faster GPU step cannot show while the step waits for its batch, and a budget that runs
    out after the precision stage would keep a dtype whose gain the loader then hides
    (pytorch/examples' imagenet, resnet18 on an H200, 4 workers: 166 of 208 ms waiting for data;
    bf16 + channels_last measured 1.67x with 16 workers feeding it and 1.26x with the script's 4).
    """
    if "loader" not in order or "precision" not in order or order.index("loader") < order.index("precision"):
        return order
    if not reference.step_ms or (reference.data_wait_ms or 0.0) < LOADER_FIRST_SHARE * reference.step_ms:
        return order
    say(f"the script as written waits for data {reference.data_wait_ms / reference.step_ms:.0%} of a step: "
        "the loader is tuned first")
    rest = [k for k in order if k != "loader"]
    rest.insert(rest.index("precision"), "loader")
    return rest


def _precision(s: _Session, stage, skip, usable, chosen: dict, generous: str, compile_trial: bool, reserve: float,
               trials_of: dict, tolerance: float) -> KnobResult:
    knob = "script:precision"
    notes = [f"precision runs feed the GPU with --try {generous} (the loader as generous as this machine allows)"
             if generous else "precision runs use the script's own loader"]
    dtypes = [("", "as written", {})]
    for name in PRECISION_KNOBS:
        why = usable(name)
        if why is None:
            dtypes.append((name, name, {name: True}))
        else:
            skip(knob, name, why)
    if usable("bf16") is None and usable("channels_last") is None:
        # run's fp32 prescription for a conv net: bf16 in the NHWC layout its tensor-core kernels
        # want (bf16 alone pays layout conversions around every convolution; pytorch/examples'
        # imagenet resnet18 on an H200: bf16 1.04x, bf16 + channels_last 1.67x); a no-op elsewhere
        dtypes.append(("bf16,channels_last", "bf16 +channels_last", {"bf16": True, "channels_last": True}))
    if not s.affordable(len(dtypes) * s.repeats, reserve_s=reserve):
        return KnobResult(knob=knob, trials=tuple(trials_of.get(knob, ())),
                          summary=f"cut by the budget: needs ~{len(dtypes) * s.repeats * s.run_s:.0f} s")
    won, why, dtype_rows = stage(knob, [(_join(spec, generous), setting, p) for spec, setting, p in dtypes])
    current = dtypes[won or 0][0]
    label = dtypes[won or 0][1]
    notes.append(f"dtype {label}: {why}")
    switches = []
    for name in SWITCH_KNOBS:
        if name in current.split(","):
            continue  # measured with the dtype
        why_not = usable(name)
        if name == "tf32" and current:
            why_not = "tf32 only changes fp32 matmuls; the autocast dtype runs them in " + current
        if name == "compile" and not compile_trial:
            why_not = "compile trial turned off (--no-compile)"
        if why_not is None:
            switches.append(name)
        else:
            skip(knob, f"{label} +{name}", why_not)
    extra = 60.0 * s.repeats if "compile" in switches else 0.0  # compile's first call: tens of seconds
    if "compile" in switches and not s.affordable((len(switches) + 1) * s.repeats, extra, reserve):
        switches.remove("compile")
        skip(knob, f"{label} +compile", f"cut by the budget (needs ~{extra + s.repeats * s.run_s:.0f} s more)")
        notes.append("compile cut by the budget")
    kept: list[str] = []
    if switches and s.affordable((len(switches) + 1) * s.repeats, reserve_s=reserve):
        arms = [(_join(current, generous), f"{label} (again)", {})]
        arms += [(_join(current, name, generous), f"{label} +{name}", {name: True}) for name in switches]
        rows = s.arms(knob, arms)
        trials_of.setdefault(knob, []).extend(rows)
        base = measured(rows[0])
        for name, row in zip(switches, rows[1:]):
            if beats(measured(row), base, tolerance):
                kept.append(name)
                notes.append(f"{name}: {compare(measured(row), base, tolerance)[0]:.2f}x beyond the noise: kept")
            elif measured(row) and base:
                gain, margin = compare(measured(row), base, tolerance)
                notes.append(f"{name}: {gain:.2f}x, inside the +-{margin:.0%} noise or slower: not taken")
    elif switches:
        notes.append(f"switches ({', '.join(switches)}) cut by the budget: need "
                     f"~{(len(switches) + 1) * s.repeats * s.run_s:.0f} s")
    chosen["precision"] = _join(current, *kept)
    summary = f"--try {chosen['precision']}" if chosen["precision"] else "the script's own precision"
    return KnobResult(knob=knob, trials=tuple(trials_of.get(knob, ())), summary=summary, notes=tuple(notes),
                      winner=dtype_rows[won].setting if won is not None and not kept else None)


def _loader(s: _Session, stage, chosen: dict, counts: tuple[int, ...], loader_spec, reserve: float,
            trials_of: dict) -> KnobResult:
    knob = "script:loader"
    arms = [(chosen["precision"], "as written", {})]
    arms += [(_join(chosen["precision"], loader_spec(w)), loader_spec(w).replace(",", " "), {"num_workers": w})
             for w in counts]
    if not s.affordable(len(arms) * s.repeats, reserve_s=reserve):
        return KnobResult(knob=knob, summary=f"cut by the budget: needs ~{len(arms) * s.repeats * s.run_s:.0f} s")
    won, why, rows = stage(knob, arms)
    if won is None:
        return KnobResult(knob=knob, trials=tuple(rows), summary="no setting ran cleanly")
    if won:
        chosen["loader"] = loader_spec(counts[won - 1])
    return KnobResult(knob=knob, trials=tuple(rows), winner=rows[won].setting, params=arms[won][2],
                      summary=(f"--try {chosen['loader']}" if won else "the script's own loader") + f" ({why})")
