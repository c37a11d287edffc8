"""Tuning a plain script: the knobs ``gpudoctor run --try`` can inject, each measured in a fresh run.

Every trial is one ``run_instrumented`` child (the ``run --try`` machinery: knobs ride in through
``GPUDOCTOR_KNOBS``, the probes record each optimizer step), so trials are isolated by
construction. What can be injected safely: the DataLoader's ``num_workers``, ``prefetch_factor``,
``pin_memory``, ``persistent_workers``, and the ``tf32`` and ``cudnn_benchmark`` switches. The batch
size, the dtype, the GradScaler and DDP live in the script's own code: those knobs need an engine
target (``--target``) and are reported as skipped. The result is a ``--try`` spec to keep.
"""

from __future__ import annotations

import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from gpudoctor.records.tune import KnobResult, Trial, TrialVerdict, TuneResult
from gpudoctor.tune.search import pick_cheapest

SCRIPT_KNOBS = ("loader", "precision")
_SKIP_WHY = {
    "batch": "the batch size is set in the script's code; tune it with --target module:function",
    "scaler": "the GradScaler is created in the script's code; tune it with --target module:function",
    "ddp": "DDP is set up in the script's code; tune it with --target module:function under torchrun",
}


def _cuda() -> bool:
    import torch

    return torch.cuda.is_available()


def measure(command: tuple[str, ...], knobs: str, run_dir: Path, *, steps: int, warmup: int, knob: str,
            setting: str, params: dict) -> Trial:
    """One fresh run of the script with ``knobs`` (a ``--try`` spec, "" for none), measured."""
    from gpudoctor.collectors.knobs import parse_knobs
    from gpudoctor.collectors.launch import RunSpec, run_instrumented
    from gpudoctor.records.rundir import read_steps

    started = time.perf_counter()
    spec = RunSpec(command=command, run_dir=run_dir, steps=warmup + steps, profile=False,
                   knobs=parse_knobs(knobs) if knobs else (), child_stdout_to_stderr=True, sample_gpu=False)
    outcome = run_instrumented(spec, say=lambda message: None)
    status = outcome.manifest.status
    wall = time.perf_counter() - started
    base = dict(knob=knob, setting=setting, params=params, wall_s=wall)
    if status == "interrupted":
        raise KeyboardInterrupt
    path = run_dir / "steps-rank0.jsonl"
    records = read_steps(path) if path.exists() else []
    if status not in ("stopped", "completed"):
        why = outcome.manifest.error or outcome.message or status
        verdict = TrialVerdict.OOM if "OutOfMemoryError" in why else TrialVerdict.FAILED
        return Trial(**base, verdict=verdict, reason=f"{status}: {why.splitlines()[-1] if why else ''}"[:300],
                     steps=len(records))
    steady = records[warmup:]
    if len(steady) < 2:
        return Trial(**base, verdict=TrialVerdict.FAILED, steps=len(records),
                     reason=f"only {len(records)} steps recorded: the trial did not really execute")
    step_ms = statistics.median(r.step_ms for r in steady)
    samples = statistics.median((r.samples or 0) for r in steady)
    peaks = [r.mem.peak_allocated_bytes for r in records if r.mem is not None]
    losses = [r.loss for r in steady if r.loss is not None]
    return Trial(**base, verdict=TrialVerdict.OK, steps=len(records), step_ms=step_ms,
                 samples_per_s=samples * 1e3 / step_ms if samples and step_ms else None,
                 data_wait_ms=statistics.median(r.data_wait_ms for r in steady),
                 peak_mem_bytes=max(peaks) if peaks else None, loss=losses[-1] if losses else None)


def tune_script(knobs: list[str], command: tuple[str, ...], *, steps: int = 20, warmup: int = 5,
                tolerance: float = 0.03, worker_counts: tuple[int, ...] = (0, 2, 4, 8),
                on_trial: Callable[[Trial], None] | None = None, work_dir: Path | None = None) -> TuneResult:
    """Sweep the injectable knobs of a plain script; the winner is a ``--try`` spec."""
    on_trial = on_trial or (lambda trial: None)
    order = ["precision", "batch", "loader", "scaler", "ddp"] if "all" in knobs else knobs
    base_dir = Path(work_dir or tempfile.mkdtemp(prefix="gpudoctor-tune-"))
    started = time.perf_counter()
    results: list[KnobResult] = []
    chosen: list[str] = []
    counter = [0]
    interrupted = False

    def run(knob: str, spec: str, setting: str, params: dict) -> Trial:
        counter[0] += 1
        trial = measure(command, ",".join(p for p in (*chosen, spec) if p), base_dir / f"{counter[0]:02d}",
                        steps=steps, warmup=warmup, knob=knob, setting=setting, params=params)
        on_trial(trial)
        return trial

    def sweep(knob: str, options: list[tuple[str, str, dict]]) -> KnobResult:
        trials = []
        try:
            for spec, setting, params in options:
                trials.append(run(knob, spec, setting, params))
        except KeyboardInterrupt:
            results.append(KnobResult(knob=knob, trials=tuple(trials), summary="interrupted (Ctrl-C)"))
            raise
        pick = pick_cheapest([t.samples_per_s if t.verdict is TrialVerdict.OK else None for t in trials],
                             tolerance=tolerance)
        if pick is None:
            return KnobResult(knob=knob, trials=tuple(trials), summary="no setting ran cleanly")
        if options[pick][0]:
            chosen.append(options[pick][0])
        return KnobResult(knob=knob, trials=tuple(trials), winner=trials[pick].setting, params=options[pick][2],
                          summary=f"--try {options[pick][0]}" if options[pick][0] else "the script's own setting")

    try:
        for knob in order:
            if knob in _SKIP_WHY:
                results.append(KnobResult(knob=knob, summary=f"skipped: {_SKIP_WHY[knob]}"))
            elif knob == "precision":
                if _cuda():
                    options = [("", "as written", {}), ("tf32", "tf32", {"tf32": True}),
                               ("cudnn_benchmark", "cudnn_benchmark", {"cudnn_benchmark": True})]
                    results.append(sweep("script:precision", options))
                else:
                    results.append(KnobResult(knob="script:precision", summary="skipped: tf32 and cudnn_benchmark "
                                              "only change CUDA kernels and there is no CUDA GPU here"))
            elif knob == "loader":
                options = [("", "as written", {})]
                options += [(f"num_workers={w},pin_memory,persistent_workers", f"num_workers={w} pinned persistent",
                             {"num_workers": w}) for w in worker_counts if w > 0]
                results.append(sweep("script:loader", options))
    except KeyboardInterrupt:
        interrupted = True
    spec = ",".join(chosen)
    final = KnobResult(knob="script:result", summary=(f"gpudoctor run --try {spec} -- {' '.join(command)}" if spec
                                               else "keep the script as it is"))
    return TuneResult(target=" ".join(command), device="script", knobs=(*results, final),
                      elapsed_s=time.perf_counter() - started, interrupted=interrupted,
                      loader={"try": spec})
