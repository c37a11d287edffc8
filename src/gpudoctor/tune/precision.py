"""The precision knob: fp32 / tf32 / bf16 / fp16, then channels_last, cudnn.benchmark and
torch.compile, each measured on real steps with the data already on the GPU.

Staged, not a full grid: the dtype is chosen first, then each switch is tried on top of what won so
far, against it (interleaved, each ``repeats`` times). Every trial also checks its loss: a setting
whose loss is not finite is rejected. A setting must beat the starting one beyond the noise
(:func:`~gpudoctor.tune.noise.pick`); among those that do, the cheapest (earliest listed: fewer
changes, fewer numerical risks) wins, so noise never picks fp16 over bf16 or compile over eager.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from gpudoctor.records.tune import KnobResult, Trial, TrialVerdict
from gpudoctor.tune.noise import pick
from gpudoctor.tune.session import TuneContext, measured

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


def _stage(ctx: TuneContext, options: list[tuple[str, dict[str, Any], Any, str | None]], trials: list[Trial],
           *, base: int) -> tuple[int | None, str]:
    """Run one stage (setting, params, config, skip reason), interleaved and repeated; return the
    winning option's index (``base``, the starting one, unless another beats it beyond the noise)."""
    runnable = [i for i, (_, _, _, skip) in enumerate(options) if skip is None]
    rows = ctx.measure([ctx.spec("precision", options[i][0], options[i][1], config=options[i][2]) for i in runnable])
    by_index = dict(zip(runnable, rows))
    measures = []
    for i, (setting, params, _config, skip) in enumerate(options):
        if skip is not None:
            trials.append(ctx.skip("precision", setting, params, skip))
            measures.append(None)
        else:
            trials.append(by_index[i])
            measures.append(measured(by_index[i]))
    won, why = pick(measures, base=base, tolerance=ctx.options.tolerance)
    return ctx.agree(won), why


def tune_precision(ctx: TuneContext) -> KnobResult:
    """Choose dtype, channels_last, cudnn.benchmark and compile; update ``ctx.config``."""
    from gpudoctor.train.precision import resolve_dtype

    first = len(ctx.trials)
    trials: list[Trial] = []
    notes: list[str] = []
    # 1. dtype (the other switches as the target set them), against the starting dtype
    start_dtype = resolve_dtype(ctx.config.precision.dtype, ctx.device)
    start = DTYPES.index(start_dtype) if start_dtype in DTYPES else 0
    dtype_options = [(d, {"precision.dtype": d}, _dtype_config(ctx, d), _cuda_only_reason(ctx, d)) for d in DTYPES]
    won, why = _stage(ctx, dtype_options, trials, base=start)
    if won is None:
        return KnobResult(knob="precision", trials=tuple(ctx.trials[first:]),
                          summary="no precision setting ran cleanly; see the reasons in the table")
    notes.append(f"dtype {DTYPES[won]}: {why}")
    dtype = DTYPES[won]
    if won != start or ctx.config.precision.dtype != "auto":
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
        setting = f"{label} {name}={'on' if other else 'off'}"
        if skip is not None:
            ctx.skip("precision", setting, {f"perf.{field}": other}, skip)
            return
        config = ctx.config.replace(perf=dataclasses.replace(ctx.config.perf, **{field: other}))
        options = [(f"{label} (again)", {}, ctx.config, None), (setting, {f"perf.{field}": other}, config, None)]
        pair: list[Trial] = []
        won, why = _stage(ctx, options, pair, base=0)
        if won != 1 and measured(pair[1]) is None and pair[1].reason:  # e.g. a compile trial dynamo ran eager
            why = f"{pair[1].verdict.value}: {pair[1].reason}"
        if won == 1:
            ctx.config = config
            baseline, label = pair[1], setting
        else:
            baseline = pair[0] if measured(pair[0]) else baseline
        notes.append(f"{name}={'on' if other else 'off'}: {why}" + ("" if won == 1 else " (not taken)"))

    switch("channels_last", "channels_last", None)
    switch("cudnn_benchmark", "cudnn.benchmark",
           None if ctx.cuda else "cudnn.benchmark only affects CUDA convolutions")
    compile_skip = None
    if not ctx.options.compile:
        compile_skip = "compile trial turned off (--no-compile)"
    elif not ctx.cuda:
        compile_skip = "torch.compile is only tried on a GPU (on the CPU compiling takes longer than the trial)"
    elif ctx.compile_cut:
        compile_skip = "cut by the budget plan (see the plan); raise --budget-s to include it"
    switch("compile", "compile", compile_skip)
    perf = ctx.config.perf
    params = {"precision.dtype": ctx.config.precision.dtype, "perf.channels_last": perf.channels_last,
              "perf.cudnn_benchmark": perf.cudnn_benchmark, "perf.compile": perf.compile}
    speedup = ""
    first_ok = trials[start] if start < len(trials) and measured(trials[start]) else None
    if first_ok is not None and first_ok is not baseline and baseline.samples_per_s:
        speedup = f" ({baseline.samples_per_s / first_ok.samples_per_s:.2f}x {first_ok.setting})"
    if baseline.samples_per_s:
        ctx.consumption_rate = baseline.samples_per_s
    return KnobResult(knob="precision", trials=tuple(ctx.trials[first:]), winner=baseline.setting, params=params,
                      summary=f"{label}{speedup}", notes=tuple(notes))
