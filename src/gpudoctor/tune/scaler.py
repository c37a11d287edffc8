"""The scaler knob: a GradScaler initial scale that does not skip the first steps.

The seeds' probe loop (seed 000 §4.2): start at ``init_scale=1`` with ``growth_interval=1``, so the
scale doubles after every clean step until the gradients overflow and it halves again; the scale
it settles at is the ceiling for this model and data. The chosen initial scale is half of it (one
halving of headroom). Then the default (65536) and the chosen scale each run real fp16 steps from
a fresh start, and the skipped steps are counted: the one that skips fewer wins (the default on a
tie: no change is cheaper). The trials run at the target's starting batch: the scale's ceiling is
set by the gradients' magnitude, which a mean-reduced loss keeps about the same across batch sizes,
and small steps keep the 30-step probe short. Needs a CUDA GPU (fp16 autocast); on the CPU the knob
is skipped.
"""

from __future__ import annotations

import dataclasses
import math

from gpudoctor.records.tune import KnobResult, TrialVerdict
from gpudoctor.tune.session import TuneContext

DEFAULT_SCALE = 2.0**16
PROBE_STEPS = 30


def initial_scale(settled: float | None, skipped: int | None) -> float | None:
    """The init scale from the probe: half the scale it settled at, as a power of two.

    ``None`` when the probe never overflowed (the scale only grew: any start up to where it got
    is safe, and the default is kept) or gave nothing to read.
    """
    if settled is None or not skipped:
        return None
    return float(2.0 ** max(0, math.floor(math.log2(max(settled, 1.0))) - 1))


def tune_scaler(ctx: TuneContext) -> KnobResult:
    """Probe the GradScaler ceiling, then compare skipped steps at the default and chosen scale."""
    first = len(ctx.trials)
    if not ctx.cuda:
        ctx.skip("scaler", "fp16 GradScaler probe", {}, "fp16 autocast and its GradScaler need a CUDA GPU")
        return KnobResult(knob="scaler", trials=tuple(ctx.trials[first:]),
                          summary="skipped: the GradScaler is only used with fp16 on a CUDA GPU")
    robust = dataclasses.replace(ctx.config.robust, nonfinite="off")  # skipped steps are the measurement

    # Eager even when the precision knob chose torch.compile: skipped steps depend on the gradients'
    # magnitude, not on how the kernels were generated, and an fp16 graph would be a new compile.
    eager = dataclasses.replace(ctx.config.perf, compile=False)

    def fp16(init: float, growth: int):
        return ctx.config.replace(robust=robust, perf=eager, precision=dataclasses.replace(
            ctx.config.precision, dtype="fp16", init_scale=init, growth_interval=growth))

    batch = max(1, min(ctx.target.config.batch_size or 32, len(ctx.target.train_dataset) // ctx.world_size))
    probe = ctx.run(ctx.spec("scaler", "probe: init_scale=1, growth every step", {"init_scale": 1.0},
                             config=fp16(1.0, 1), warmup=0, steps=PROBE_STEPS, batch_size=batch))
    notes = []
    chosen = None
    if probe.verdict is TrialVerdict.OK:
        chosen = initial_scale(probe.scaler_scale, probe.skipped_steps)
        if chosen is None:
            notes.append(f"the scale grew to {probe.scaler_scale:g} in {PROBE_STEPS} steps without an overflow")
        else:
            notes.append(f"the probe's scale settled at {probe.scaler_scale:g} ({probe.skipped_steps} overflows)")
    chosen = ctx.agree(chosen)
    growth = ctx.config.precision.growth_interval
    candidates = [DEFAULT_SCALE] + ([chosen] if chosen is not None and chosen != DEFAULT_SCALE else [])
    results = []
    for init in candidates:
        t = ctx.run(ctx.spec("scaler", f"init_scale={init:g}", {"init_scale": init}, config=fp16(init, growth),
                             warmup=0, steps=max(ctx.options.steps, 20), batch_size=batch))
        results.append((init, t))
    ok = [(init, t) for init, t in results if t.verdict is TrialVerdict.OK and t.skipped_steps is not None]
    if not ok:
        return KnobResult(knob="scaler", trials=tuple(ctx.trials[first:]), notes=tuple(notes),
                          summary="no fp16 trial ran cleanly; see the reasons in the table")
    best_init, best = min(ok, key=lambda p: (p[1].skipped_steps, p[0] != DEFAULT_SCALE))
    best_init = ctx.agree(best_init)
    default_skips = next((t.skipped_steps for i, t in ok if i == DEFAULT_SCALE), None)
    if default_skips is not None:
        notes.append(f"with the default init_scale {DEFAULT_SCALE:g}: {default_skips} of "
                     f"{max(ctx.options.steps, 20)} first steps skipped")
    ctx.config = ctx.config.replace(precision=dataclasses.replace(ctx.config.precision, init_scale=best_init))
    return KnobResult(knob="scaler", trials=tuple(ctx.trials[first:]), winner=best.setting,
                      params={"precision.init_scale": best_init},
                      summary=f"init_scale={best_init:g}: {best.skipped_steps} skipped steps at the start "
                              "(used when precision.dtype is fp16)", notes=tuple(notes))
