"""Every number the run rules decide with, in one frozen dataclass, each with the reason that set it.

Rules read these instead of hard-coding limits, so a test (or a user with an unusual workload:
``gpudoctor run|diagnose|doctor --thresholds FILE``) can move one limit without editing a rule.
Each field carries its reason in ``metadata["reason"]``: where a measurement set the value the
reason quotes it (and where it was recorded); where none did, the reason says it is a judgement.
``docs/THRESHOLDS.md`` is generated from this table (``python -m gpudoctor.report.thresholds_doc``)
and a test keeps the two equal.

Shares are fractions (0.0-1.0), of the median step time unless the reason says otherwise.
Pure: :func:`thresholds_from_mapping` validates already-parsed values; reading the TOML file is
the CLI's job.
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace
from typing import Any

from gpudoctor.errors import GpuDoctorUserError
from gpudoctor.records.units import MIB


def _t(default: Any, reason: str) -> Any:
    return field(default=default, metadata={"reason": reason})


# A share of the step that gives a "10% faster" claim; several limits reuse it on purpose.
_GAIN_BAR = ("10%: about twice the step-to-step noise of one script on a busy shared machine, so "
             "a fix worth less may not be measurable (the same bar as warn_gain).")


@dataclass(frozen=True, slots=True, kw_only=True)
class Thresholds:
    """Decision limits of the run analysis; see each field's ``metadata["reason"]`` (and
    ``docs/THRESHOLDS.md``, generated from them)."""

    # -- steady state ------------------------------------------------------------------------
    warmup_steps: int = _t(5, "Steps dropped from the start of every rank before statistics: the first steps pay for cuDNN autotuning, allocator growth, lazy CUDA init and worker start-up. 5 covered them on the recorded fixture runs (tests/fixtures/runs) while keeping most of a 60-step window.")
    warmup_frac: float = _t(0.1, "Also drop at least this share of the steps, since long runs warm up longer (torch.compile, cache growth). A judgement: 10% of a 60-step run is 6 steps, about warmup_steps.")
    min_steps: int = _t(3, "Fewer steady steps than this and step statistics are not trusted; 3 is the least a median and a least-squares line need.")
    # -- severity ----------------------------------------------------------------------------
    warn_gain: float = _t(0.10, "A performance finding whose expected gain reaches this share of step time is a WARN. " + _GAIN_BAR)
    info_gain: float = _t(0.03, "Below this expected gain a performance finding is not reported at all: 3% is the run-to-run noise of the same script on one GPU.")
    # -- input and copies --------------------------------------------------------------------
    data_wait_min_share: float = _t(0.10, "Data-loader bound when the GPU idles waiting for the next batch this share of a step. " + _GAIN_BAR)
    data_wait_note_min_share: float = _t(0.005, "Wording, not a decision: the data-loader evidence adds 'of it, X% with the GPU idle' only when the exposed wait is at least this much below the host's wait (0.5 percentage points, five times the 0.1% the shares are printed with), so the line is not printed for two nearly equal numbers. A judgement.")
    pageable_min_share: float = _t(0.5, "Share of host-to-device bytes from unpinned memory that makes the copies 'pageable': most of them. A judgement; pinning the rest is the fix either way.")
    h2d_min_bytes_per_step: int = _t(MIB, "Copies smaller than this per step are not worth a finding: 1 MiB moves in ~50 us even from pageable memory (21.4 GB/s pageable vs 55.5 GB/s pinned, measured on an H200).")
    per_sample_min_copies: int = _t(32, "This many host-to-device copies per step or more, each small, suggests one copy per sample instead of one per batch. A judgement: a batch is copied as a few tensors (inputs, targets), per-sample copying makes one per sample, and batches are rarely smaller than 32.")
    per_sample_max_bytes: int = _t(256 * 1024, "The mean bytes per copy under which copies count as 'small': 256 KiB sits between a CIFAR image (12 KiB) and a 3x224x224 fp32 image (588 KiB), so per-sample image copies count and batch copies do not.")
    blocking_min_share: float = _t(0.5, "Pinned copies are 'blocking' when at least this share of them ran without non_blocking=True: most of them. A judgement; with fewer the loop already overlaps its main copies.")
    # -- host syncs, launch overhead, compute ------------------------------------------------
    sync_min_per_step: float = _t(1.0, "Host syncs per step (median) from which the loop syncs 'every step': one .item() per step is the common case.")
    idle_min_share: float = _t(0.15, "GPU idle share of the step from which launch overhead or syncs matter. A judgement, set above warn_gain because removing syncs or launches recovers only part of the idle time.")
    host_bound_margin: float = _t(1.5, "With host syncs every step, the loop is launch-bound only when the host's own work per step exceeds the GPU's busy time by this factor: closer than that, the syncs (which make host and GPU take turns) cost more than the launches, and removing them overlaps the two. A model margin, not fitted to a case.")
    tiny_kernel_us: float = _t(20.0, "A median kernel shorter than this is 'tiny': a launch costs ~5-10 us of host time, so a kernel under 20 us cannot hide the next launch.")
    tiny_kernel_min_frac: float = _t(0.5, "Launch-bound also when at least this share of kernels are under 10 us (the profiler window's fixed bucket, WindowSummary.kernels_under_10us_frac): most of them.")
    compute_min_busy: float = _t(0.6, "GPU busy share from which a run counts as compute-bound, so that faster arithmetic (bf16, TF32) would shorten the step. A judgement: below it the idle time is the bigger lever.")
    bf16_speedup: float = _t(2.0, "Expected speed-up of the GPU part from fp32 to bf16 autocast. Conservative: on one H200 matmul goes from 51 (fp32) to 784 TFLOP/s (bf16) (DESIGN.md, measured), but convolutions, norms and element-wise ops gain far less.")
    tf32_speedup: float = _t(1.3, "The same for fp32 with TF32 already on: TF32 matmul measured 434 TFLOP/s on the H200, so bf16 gains less on top of it. A judgement from those figures.")
    cudnn_benchmark_min_busy: float = _t(0.5, "cudnn.benchmark off is only worth a note when the GPU is busy at least this share of the step: below it the GPU mostly waits and faster convolutions would not shorten the step. A judgement.")
    # -- memory ------------------------------------------------------------------------------
    leak_min_bytes_per_step: float = _t(256 * 1024, "Allocated memory growing faster than this per step after warm-up is a leak candidate: a steady loop allocates the same every step, so its slope is ~0.")
    leak_min_r2: float = _t(0.8, "The growth must be this linear (least-squares R^2), not a one-off jump such as a lazily built optimizer state.")
    leak_min_growth_frac: float = _t(0.05, "And it must add this share of the first post-warm-up allocation. A judgement: less growth over a recorded window is too small to run a job out of memory soon.")
    leak_error_steps: int = _t(10_000, "A leak is an ERROR (not a WARN) when at its rate the GPU is full within this many more steps: at 0.1-1 s a step that is 17 minutes to 3 hours, inside one training job. A judgement.")
    frag_min_waste_frac: float = _t(0.3, "(peak reserved - peak allocated) / peak reserved from which the allocator holds memory no tensor used at the peak. A judgement: the caching allocator rounds blocks up, which wastes a few percent by design.")
    frag_min_waste_bytes: int = _t(512 * MIB, "And at least this much of it (512 MiB), so small models stay silent.")
    headroom_max_mem_frac: float = _t(0.4, "Peak reserved under this share of GPU memory leaves room for a batch at least twice as large (activations grow with the batch; weights and optimizer state do not).")
    headroom_max_busy: float = _t(0.8, "'GPU not saturated' below this busy share: a larger batch fills the remaining 20% with more work per launch. A judgement.")
    headroom_target_mem_frac: float = _t(0.8, "The headroom fix sizes the larger batch to this share of GPU memory, leaving 20% for fragmentation, evaluation and variable shapes. A judgement.")
    batch_fit_margin: float = _t(0.1, "`memory run`: share of GPU memory kept free when extrapolating the largest batch that fits (the same default as `memory estimate --margin`).")
    # -- numerics ----------------------------------------------------------------------------
    scaler_min_scale: float = _t(1.0, "A GradScaler scale under this has collapsed: it starts at 65536, and 1.0 means every gradient still overflows fp16 at scale 1.")
    scaler_max_skip_frac: float = _t(0.1, "Share of post-warm-up steps the scaler may skip before it is a problem: it skips one step per 2000 by design when it grows the scale.")
    grad_explode_factor: float = _t(10.0, "The global gradient norm 'explodes' when the median of the last quarter of the steady steps' norms exceeds this many times the median of the first quarter. A healthy run's norm drifts by small factors as the loss falls (it usually shrinks); a diverging one grows geometrically; medians of quarters keep one spiky batch from deciding.")
    # -- several ranks -----------------------------------------------------------------------
    comm_min_exposed_share: float = _t(0.10, "DDP communication not hidden by compute from this share of a step. " + _GAIN_BAR)
    straggler_min_skew: float = _t(0.10, "A rank is a straggler when it costs the others this share of a step. " + _GAIN_BAR)
    straggler_min_ms: float = _t(2.0, "... and at least this many milliseconds per step. A rank preempted once per step by another runnable thread loses up to one scheduler time slice, 0.75-3 ms on Linux (CFS sched_min_granularity scaled by the core count). It is what fired on a 12-step, 2-rank gloo run on 2 busy CPU cores (rank 0 4.67 ms, rank 1 3.01 ms per step): 1.7 ms of scheduling noise.")
    straggler_min_steps: int = _t(20, "Steady steps every rank needs before the straggler rule judges. Ranks that meet in a collective every step are never more than about one step apart, so the means of n steps differ by up to 2 steps / n from where the count starts and ends alone; below 2 / straggler_min_skew = 20 steps that boundary effect can reach the 10% skew by itself.")
    # -- periodic stalls ---------------------------------------------------------------------
    tail_slow_factor: float = _t(1.5, "A steady step longer than this many median steps is a slow step. In the H200 recordings of workloads without stalls the 90th percentile step is 1.01-1.24 medians (tests/fixtures/runs: basic_user, item_every_step, pageable_copies, tiny_batch, ...), so 1.5 is outside that jitter, while a loader that stalls for half a step every N steps still counts.")
    tail_excess_cover: float = _t(0.8, "The stalls are the fewest slow steps that carry this share of the slow steps' excess time. pytorch/examples' dcgan on an H200 (a 1,000-image dataset, so an epoch every 16 steps) had 13 of 49 steps over 1.5x the median: 7 long ones at each epoch's end and start (checkpoint, image save, workers restarted: 150-1,200 ms) held 95% of the excess, 6 at 2x the median from loader jitter; counting all 13 made the run look bimodal and hid a 72% stall.")
    tail_stall_equal_frac: float = _t(0.5, "Past tail_excess_cover, a slow step whose excess is at least this share of the shortest stall's is a stall too (stalls of about equal length are all counted, not cut at the cover). A judgement.")
    tail_max_slow_frac: float = _t(0.25, "At most this share of the steady steps may be slow for them to be stalls: with more, the step time is bimodal, not stalling (the H200 `clean` recording has 3.5 ms and 18.7 ms steps, 40% of them long; a CPU run on 2 busy cores varies 52-3,600 ms).")
    tail_min_excess: float = _t(0.10, "The slow steps must cost this share of the run's time (beyond what median steps would have taken) for a periodic-stall finding; the gain of removing them is exactly that share. " + _GAIN_BAR)
    tail_min_slow_steps: int = _t(2, "A stall must recur: at least this many stalled steps (Tail.stalls; one slow step is a one-off, not a period); 2 is the least that has a period.")
    tail_regular_cv: float = _t(0.25, "Slow steps are 'regular' (a stall every N steps) when the distances between them vary by at most this share of their mean (population std / mean); scheduling noise on a busy host scatters them. A judgement.")
    tail_cause_min_share: float = _t(0.5, "The data loader (or an epoch boundary) is named as the stall's cause when the slow steps' extra data wait is at least this share of their extra time: the larger part of it. A judgement.")
    tail_cause_part_min_share: float = _t(0.15, "An epoch-boundary stall's parts (the data wait of a worker restart, the host syncs, the rest of the host work) are each named, with the prescription for it, when the part carries at least this share of the stall's time beyond the median: pytorch/examples' dcgan on an H200 spent 88 ms of a ~330 ms boundary waiting for restarted workers (27%) and 16 ms in the image dump's syncs, the rest in its checkpoints and PNG writes; a part under 15% would not make a 10% faster run even where the stall costs the whole run. A judgement.")
    # -- one-off slow steps (analysis.one_off) -----------------------------------------------
    oneoff_factor: float = _t(4.0, "A slow step is a one-off (left out of the steady figures, reported on its own) when its time beyond the median is at least this many times the typical excess of the other stalled steps (their median), or of the median step when nothing else stalled. In pytorch/examples' dcgan on an H200 the six epoch-boundary stalls each took 152-351 ms beyond the median (the largest 2.2x their median excess of 158 ms) and the one cuDNN autotuning step 1,176 ms (7.5x): repeats of one stall varied by about 2x, so 4x is well outside that spread.")
    oneoff_min_steps: int = _t(20, "A step is called one-off only when at least this many other steady steps show it does not recur; fewer and a stall with a long period looks the same (the same count straggler_min_steps and slowdown_min_steps ask for).")
    oneoff_min_share: float = _t(0.03, "And only when it costs at least this share of the steady steps' time: below the run-to-run noise (info_gain) leaving it in moves no figure that matters.")
    stuck_min_idle_s: float = _t(10.0, "A run interrupted with Ctrl-C this long after its last optimizer step (and a quarter of the stall limit) was stuck, not stopped mid-work: 10 s is several times the slowest steps recorded (a CPU run on 2 busy cores: up to 3.6 s a step).")
    # -- slow-down over time -----------------------------------------------------------------
    slowdown_min_growth: float = _t(0.10, "Training 'slows down over time' when the least-squares step time grows by at least this share of the first fitted steady step: a smaller drift over a recorded window is within the run-to-run noise of one script on one GPU (info_gain x 3).")
    slowdown_min_r2: float = _t(0.8, "And the line (fitted to window medians, analysis.steps.StepTrend) must explain this share of their variance. The chance level of independent windows (R^2 >= 0.5 by chance ~1% at n = 10) does not hold on a real machine, where consecutive windows drift together with the host's clocks and load: pytorch/examples' siamese_network on an H200 (host-bound launches, 1.1 s of steady steps, no recompile, flat GPU and host memory) rose from 18 to 26 ms and fell back to 23.5 ms, R^2 0.65 over 9 windows, and was called a 34% slow-down. A slow-down tied to the step (the seed's list of tensors summed every step) fits at R^2 0.97-0.99 (tests/unit/run/test_run_slowdown.py, 5 runs on a busy 2-core machine); 0.8 is the linearity leak_min_r2 asks of memory growth.")
    slowdown_min_steps: int = _t(20, "The trend is judged on at least this many steady steps (6 windows of 3); fewer and a burst of scheduling noise on a busy host can make a line out of nothing.")
    slowdown_min_late_slope: float = _t(0.25, "The later half of the windows must still climb at this share of the overall slope or more: a warm-up that outlasts the warm-up drop levels off. pytorch/examples' vae on an H200 went from 8 to 13 ms a step over its first 30 steps and then stayed flat, which a line through all 49 steady steps projected to 145 ms steps 1000 steps later.")
    trend_windows: int = _t(10, "The trend line is fitted to the medians of at most this many windows of steps, not to single steps: one step that waits on the scheduler is a point far off any line (a CPU run whose steps grew from 0.23 to 0.52 ms had R^2 0.01 over its single steps because of a few 1-2 ms ones). 10 points give slowdown_min_r2 its ~1% chance level.")
    trend_min_window: int = _t(3, "Each trend window holds at least this many steps, so its median can ignore one outlier.")

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            if value < 0:
                raise GpuDoctorUserError(f"threshold {f.name}={value} is negative; use a value >= 0")
            if f.name in _SHARES and value > 1:
                raise GpuDoctorUserError(f"threshold {f.name}={value} is a share; give a value between 0 and 1")
        if self.info_gain > self.warn_gain:
            raise GpuDoctorUserError("threshold info_gain must not exceed warn_gain; lower info_gain")
        if self.bf16_speedup < 1 or self.tf32_speedup < 1:
            raise GpuDoctorUserError("thresholds bf16_speedup and tf32_speedup are ratios >= 1; use 1.0 for 'no gain'")
        if self.min_steps < 1 or self.trend_min_window < 1 or self.trend_windows < 3:
            raise GpuDoctorUserError("thresholds min_steps and trend_min_window must be >= 1, trend_windows >= 3")
        if self.batch_fit_margin >= 1:
            raise GpuDoctorUserError("threshold batch_fit_margin must be below 1 (some memory must be usable)")


# the fields that are fractions in [0, 1]
_SHARES = frozenset({
    "warmup_frac", "warn_gain", "info_gain", "data_wait_min_share", "data_wait_note_min_share",
    "pageable_min_share", "blocking_min_share", "idle_min_share", "tiny_kernel_min_frac",
    "compute_min_busy", "cudnn_benchmark_min_busy", "leak_min_r2", "frag_min_waste_frac",
    "headroom_max_mem_frac", "headroom_max_busy", "headroom_target_mem_frac", "batch_fit_margin",
    "scaler_max_skip_frac", "comm_min_exposed_share", "straggler_min_skew", "tail_max_slow_frac",
    "tail_min_excess", "tail_cause_min_share", "tail_excess_cover", "tail_stall_equal_frac",
    "slowdown_min_r2", "tail_cause_part_min_share", "oneoff_min_share",
})


@dataclass(frozen=True, slots=True)
class ThresholdInfo:
    """One row of the threshold table: its name, type, default and reason."""

    name: str
    type: str
    default: int | float
    reason: str
    share: bool


def threshold_table() -> tuple[ThresholdInfo, ...]:
    """Every threshold in declaration order, with its reason (``docs/THRESHOLDS.md`` renders it)."""
    return tuple(ThresholdInfo(name=f.name, type=_type_name(f.type), default=f.default,
                               reason=f.metadata["reason"], share=f.name in _SHARES)
                 for f in fields(Thresholds))


def _type_name(annotation: Any) -> str:
    return annotation if isinstance(annotation, str) else annotation.__name__


def thresholds_from_mapping(values: Mapping[str, Any], source: str = "thresholds") -> Thresholds:
    """The default thresholds with ``values`` (name -> number, from a parsed TOML file) applied.

    Raises :class:`GpuDoctorUserError` naming ``source`` for an unknown name (with the closest
    known one), a value of the wrong type (a bool, a string, a float for an integer threshold),
    or a value out of range.
    """
    known = {f.name: _type_name(f.type) for f in fields(Thresholds)}
    changes: dict[str, int | float] = {}
    for name, value in values.items():
        if name not in known:
            close = difflib.get_close_matches(name, known, n=1)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            raise GpuDoctorUserError(f"{source}: unknown threshold {name!r}{hint} "
                                     "(the names: gpudoctor's docs/THRESHOLDS.md)")
        want = known[name]
        ok = (isinstance(value, int) if want == "int" else isinstance(value, (int, float)))
        if isinstance(value, bool) or not ok:
            raise GpuDoctorUserError(f"{source}: threshold {name} must be {'an integer' if want == 'int' else 'a number'}, "
                                     f"got {value!r} ({type(value).__name__})")
        changes[name] = float(value) if want == "float" else value
    try:
        return replace(Thresholds(), **changes)
    except GpuDoctorUserError as exc:
        raise GpuDoctorUserError(f"{source}: {exc}") from None


__all__ = ["MIB", "ThresholdInfo", "Thresholds", "threshold_table", "thresholds_from_mapping"]
