"""The precision knob: fp32 / tf32 / bf16 / fp16, then channels_last, cudnn.benchmark and
torch.compile, each measured on real steps with the data already on the GPU.

Staged, not a full grid: the dtype is chosen first, then each switch is tried on top of what won so
far. Every trial also checks its loss: a setting whose loss is not finite is rejected. Among the
settings within the tolerance of the fastest, the cheapest (earliest listed: fewer changes, fewer
numerical risks) wins, so noise never picks fp16 over bf16 or compile over eager.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from gpudoctor.records.tune import KnobResult, Trial, TrialVerdict
from gpudoctor.tune.search import pick_cheapest
from gpudoctor.tune.session import TuneContext

DTYPES = ("fp32", "tf32", "bf16", "fp16")


def _rate(trial: Trial) -> float | None:
    return trial.samples_per_s if trial.verdict is TrialVerdict.OK else None


def _dtype_config(ctx: TuneContext, dtype: str) -> Any:
    return ctx.config.replace(precision=dataclasses.replace(ctx.config.precision, dtype=dtype))


def _cuda_only_reason(ctx: TuneContext, dtype: str) -> str | None:
    if ctx.cuda:
        if dtype == "bf16":
            import torch

            if not torch.cuda.is_bf16_supported():
                return "this GPU has no bf16"
        return None
    if dtype in ("tf32", "fp16"):
        return f"{dtype} needs a CUDA GPU"
    return None


def _stage(ctx: TuneContext, options: list[tuple[str, dict[str, Any], Any, str | None]],
           trials: list[Trial]) -> int | None:
    """Run one stage (setting, params, config, skip reason); return the winning option's index."""
    rates: list[float | None] = []
    for setting, params, config, skip in options:
        if skip is not None:
            trials.append(ctx.skip("precision", setting, params, skip))
            rates.append(None)
            continue
        trial = ctx.run(ctx.spec("precision", setting, params, config=config))
        trials.append(trial)
        rates.append(_rate(trial))
    return ctx.agree(pick_cheapest(rates, tolerance=ctx.options.tolerance))


def tune_precision(ctx: TuneContext) -> KnobResult:
    """Choose dtype, channels_last, cudnn.benchmark and compile; update ``ctx.config``."""
    first = len(ctx.trials)
    trials: list[Trial] = []
    notes: list[str] = []
    # 1. dtype (the other switches as the target set them)
    dtype_options = [(d, {"precision.dtype": d}, _dtype_config(ctx, d), _cuda_only_reason(ctx, d)) for d in DTYPES]
    won = _stage(ctx, dtype_options, trials)
    if won is None:
        return KnobResult(knob="precision", trials=tuple(ctx.trials[first:]),
                          summary="no precision setting ran cleanly; see the reasons in the table")
    dtype = DTYPES[won]
    ctx.config = _dtype_config(ctx, dtype)
    baseline = trials[won]
    label = dtype

    def switch(field: str, name: str, skip: str | None) -> None:
        nonlocal baseline, label
        current = getattr(ctx.config.perf, field)
        if current is None:  # "auto" (channels_last): what the engine will actually do here
            from gpudoctor.train.perf import resolve_channels_last

            current = resolve_channels_last(None, ctx.target.model_factory(), ctx.device)
        other = not current
        if skip is not None:
            ctx.skip("precision", f"{label} {name}={'on' if other else 'off'}", {f"perf.{field}": other}, skip)
            return
        config = ctx.config.replace(perf=dataclasses.replace(ctx.config.perf, **{field: other}))
        setting = f"{label} {name}={'on' if other else 'off'}"
        trial = ctx.run(ctx.spec("precision", setting, {f"perf.{field}": other}, config=config))
        # cost order: off first, then on
        pair = [baseline, trial] if not current else [trial, baseline]
        pick = ctx.agree(pick_cheapest([_rate(t) for t in pair], tolerance=ctx.options.tolerance))
        chosen_value = bool(pick) if pick is not None else current
        if chosen_value != current:
            ctx.config = config
            baseline, label = trial, setting
        elif trial.verdict is TrialVerdict.OK and baseline.samples_per_s and trial.samples_per_s:
            notes.append(f"{name}={'on' if other else 'off'}: {trial.samples_per_s / baseline.samples_per_s:.2f}x "
                         "(not taken: within the tolerance or slower)")

    switch("channels_last", "channels_last", None)
    switch("cudnn_benchmark", "cudnn.benchmark",
           None if ctx.cuda else "cudnn.benchmark only affects CUDA convolutions")
    compile_skip = None
    if not ctx.options.compile:
        compile_skip = "compile trial turned off (--no-compile)"
    elif not ctx.cuda:
        compile_skip = "torch.compile is only tried on a GPU (on the CPU compiling takes longer than the trial)"
    switch("compile", "compile", compile_skip)
    perf = ctx.config.perf
    params = {"precision.dtype": ctx.config.precision.dtype, "perf.channels_last": perf.channels_last,
              "perf.cudnn_benchmark": perf.cudnn_benchmark, "perf.compile": perf.compile}
    speedup = ""
    first_ok = next((t for t in ctx.trials[first:] if t.verdict is TrialVerdict.OK and t.samples_per_s), None)
    if first_ok is not None and first_ok is not baseline and baseline.samples_per_s:
        speedup = f" ({baseline.samples_per_s / first_ok.samples_per_s:.2f}x {first_ok.setting})"
    return KnobResult(knob="precision", trials=tuple(ctx.trials[first:]), winner=baseline.setting, params=params,
                      summary=f"{label}{speedup}", notes=tuple(notes))
