"""The numbers the run rules decide with, in one frozen dataclass, each default with its reason.

Rules read these instead of hard-coding limits, so a test (or a user with an unusual workload) can
move one limit without editing a rule. Shares are fractions of the median step time (0.0-1.0).
"""

from __future__ import annotations

from dataclasses import dataclass, fields

from gpudoctor.records.units import MIB


@dataclass(frozen=True, slots=True, kw_only=True)
class Thresholds:
    """Decision limits of the run analysis.

    Attributes:
        warmup_steps: steps dropped from the start of every rank before statistics. The first steps
            pay for cuDNN autotuning, allocator growth, lazy CUDA init and worker start-up; 5 steps
            cover them on the runs we recorded while keeping most of a 60-step window.
        warmup_frac: also drop at least this share of the steps (long runs warm up longer).
        min_steps: fewer post-warm-up steps than this and step statistics are not trusted.
        warn_gain: a performance finding whose expected gain reaches this share of step time is a
            WARN. 10% is about the step-to-step noise of a busy shared machine times two: below it a
            "fix" may not be measurable.
        info_gain: below this expected gain a performance finding is not reported at all (3%: the
            run-to-run noise of the same script on one GPU).
        data_wait_min_share: data-loader bound when waiting for batches takes this share of a step.
        pageable_min_share: share of host-to-device bytes from unpinned memory that makes the copies
            "pageable" (most of them).
        h2d_min_bytes_per_step: copies smaller than this per step are not worth a finding (1 MiB
            moves in ~50 us even pageable).
        per_sample_min_copies: this many host-to-device copies per step or more, each small,
            suggests one copy per sample instead of one per batch.
        per_sample_max_bytes: the mean bytes per copy under which copies count as "small"
            (256 KiB: a 3x224x224 fp32 image is 588 KiB, a CIFAR image 12 KiB).
        sync_min_per_step: counted host syncs per step (median) from which the loop syncs "every
            step" (one ``.item()`` per step is the common case).
        idle_min_share: GPU idle share of the step from which launch overhead or syncs matter.
        tiny_kernel_us: a kernel shorter than this is "tiny" (launch costs ~5-10 us of host time,
            so a kernel under 20 us cannot hide the next launch).
        tiny_kernel_min_frac: launch-bound needs at least this share of kernels under 10 us, or a
            median kernel under ``tiny_kernel_us``.
        compute_min_busy: GPU busy share from which a run counts as compute-bound.
        bf16_speedup: expected end-to-end speed-up of the GPU part from fp32 to bf16 autocast.
            2.0 is conservative: on one H200 matmul goes from 51 (fp32) to 784 TFLOP/s (bf16)
            (DESIGN.md, measured), but convolutions, norms and element-wise ops gain far less.
        tf32_speedup: the same for fp32 with TF32 already on (TF32 matmul measured 434 TFLOP/s,
            so bf16 gains less on top of it).
        leak_min_bytes_per_step: allocated memory growing faster than this after warm-up is a
            leak candidate (256 KiB/step: a steady loop allocates the same every step).
        leak_min_r2: the growth must be this linear (least-squares R^2), not a one-off jump.
        leak_min_growth_frac: and it must add this share of the first post-warm-up allocation.
        frag_min_waste_frac: (peak reserved - peak allocated) / peak reserved from which the
            allocator holds memory no tensor ever used at the peak.
        frag_min_waste_bytes: and at least this much of it (512 MiB), so small models stay silent.
        headroom_max_mem_frac: peak reserved under this share of GPU memory leaves room for a batch
            at least twice as large.
        headroom_max_busy: "GPU not saturated" below this busy share.
        scaler_min_scale: a GradScaler scale under this has collapsed (it starts at 65536; 1.0
            means every gradient still overflows fp16 at scale 1).
        scaler_max_skip_frac: share of post-warm-up steps the scaler may skip before it is a
            problem (it skips one step per 2000 by design when growing the scale).
        comm_min_exposed_share: DDP communication not hidden by compute from this share of a step.
        straggler_min_skew: a rank is a straggler when it costs the others this share of a step.
        straggler_min_ms: ... and at least this many milliseconds per step. A rank preempted once
            per step by another runnable thread (a DataLoader worker, the sampler, another rank
            on a shared core) loses up to one scheduler time slice, 0.75-3 ms on Linux (CFS
            ``sched_min_granularity`` scaled by the core count); a difference under 2 ms cannot
            be told from that. It is what fired on a 12-step, 2-rank gloo run on 2 busy CPU
            cores (rank 0 4.67 ms, rank 1 3.01 ms per step): 1.7 ms of scheduling noise.
        tail_slow_factor: a steady step longer than this many median steps is a slow step. 1.5:
            in the H200 recordings of workloads without stalls the 90th percentile step is
            1.01-1.24 medians (tests/fixtures/runs: basic_user, item_every_step, pageable_copies,
            tiny_batch, ...), so 1.5 is outside that jitter, while a loader that stalls for half
            a step every N steps still counts.
        tail_excess_cover: the stalls are the fewest slow steps that carry this share of the
            slow steps' excess time. 0.8: pytorch/examples' dcgan on an H200 (a 1,000-image
            dataset, so an epoch every 16 steps) had 13 of 49 steps over 1.5x the median: 7 long
            ones at each epoch's end and start (checkpoint, image save, workers restarted:
            150-1,200 ms) held 95% of the excess, 6 at 2x the median from loader jitter; counting
            all 13 made the run look bimodal and hid a 72% stall.
        tail_max_slow_frac: at most this share of the steady steps may be slow for them to be
            stalls: with more, the step time is bimodal, not stalling (a GPU-bound host alternates
            between a full and a draining launch queue: the H200 ``clean`` recording has 3.5 ms
            and 18.7 ms steps, 40% of them long; a CPU run on 2 busy cores varies 52-3,600 ms).
        tail_min_excess: the slow steps must cost this share of the run's time (beyond what
            median steps would have taken) for a periodic-stall finding; 10%, the same bar as
            ``warn_gain``, since the gain of removing them is exactly that share.
        straggler_min_steps: steady steps every rank needs before the straggler rule judges.
            Ranks that meet in a collective every step are never more than about one step apart,
            so the means of n steps differ by up to 2 steps / n from where the count starts and
            ends alone; below ``2 / straggler_min_skew`` = 20 steps that boundary effect can
            reach the 10% skew by itself.
        slowdown_min_growth: training "slows down over time" when the least-squares step time
            grows by at least this share of the first fitted steady step over the steady steps.
            10%, the same bar as ``warn_gain``: a smaller drift over a recorded window is within
            the run-to-run noise of one script on one GPU (``info_gain`` x 3).
        slowdown_min_r2: and the line (fitted to the medians of up to 10 windows of steps,
            ``analysis.steps.StepTrend``) must explain this share of their variance (R^2): a
            steady climb, not a few slow steps at the end. 0.5: for n independent noisy points
            R^2 >= 0.5 with a rising slope happens by chance with probability ~1% at n = 10
            (t = sqrt(n - 2) with n - 2 degrees of freedom), and the 10% growth must hold too.
        slowdown_min_steps: the trend is judged on at least this many steady steps (6 windows
            of 3); fewer and a burst of scheduling noise on a busy host can make a line out of
            nothing. The rule also needs the later half of the windows still climbing (at a quarter
            of the overall slope or more): a warm-up that outlasts the warm-up drop levels off -
            pytorch/examples' vae on an H200 went from 8 to 13 ms a step over its first 30
            steps and then stayed flat, which a line through all 49 steady steps projected to
            145 ms steps 1000 steps later.
        grad_explode_factor: the global gradient norm "explodes" when the median of the last
            quarter of the steady steps' norms exceeds this many times the median of the first
            quarter. 10x: a healthy run's norm drifts by small factors as the loss falls (it
            usually shrinks), while a diverging one grows geometrically; medians of quarters
            keep one spiky batch from deciding.
    """

    warmup_steps: int = 5
    warmup_frac: float = 0.1
    min_steps: int = 3
    warn_gain: float = 0.10
    info_gain: float = 0.03
    data_wait_min_share: float = 0.10
    pageable_min_share: float = 0.5
    h2d_min_bytes_per_step: int = MIB
    per_sample_min_copies: int = 32
    per_sample_max_bytes: int = 256 * 1024
    sync_min_per_step: float = 1.0
    idle_min_share: float = 0.15
    tiny_kernel_us: float = 20.0
    tiny_kernel_min_frac: float = 0.5
    compute_min_busy: float = 0.6
    bf16_speedup: float = 2.0
    tf32_speedup: float = 1.3
    leak_min_bytes_per_step: float = 256 * 1024
    leak_min_r2: float = 0.8
    leak_min_growth_frac: float = 0.05
    frag_min_waste_frac: float = 0.3
    frag_min_waste_bytes: int = 512 * MIB
    headroom_max_mem_frac: float = 0.4
    headroom_max_busy: float = 0.8
    scaler_min_scale: float = 1.0
    scaler_max_skip_frac: float = 0.1
    comm_min_exposed_share: float = 0.10
    straggler_min_skew: float = 0.10
    straggler_min_ms: float = 2.0
    straggler_min_steps: int = 20
    tail_slow_factor: float = 1.5
    tail_excess_cover: float = 0.8
    tail_max_slow_frac: float = 0.25
    tail_min_excess: float = 0.10
    slowdown_min_growth: float = 0.10
    slowdown_min_r2: float = 0.5
    slowdown_min_steps: int = 20
    grad_explode_factor: float = 10.0

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            if value < 0:
                raise ValueError(f"Thresholds.{f.name}={value} is negative; use a value >= 0")
        for name in ("warmup_frac", "warn_gain", "info_gain", "data_wait_min_share",
                     "pageable_min_share", "idle_min_share", "tiny_kernel_min_frac",
                     "compute_min_busy", "leak_min_r2", "frag_min_waste_frac",
                     "headroom_max_mem_frac", "headroom_max_busy", "scaler_max_skip_frac",
                     "comm_min_exposed_share", "straggler_min_skew", "tail_min_excess", "tail_max_slow_frac",
                     "tail_excess_cover",
                     "slowdown_min_r2"):
            if getattr(self, name) > 1:
                raise ValueError(f"Thresholds.{name} is a share; give a value between 0 and 1")
        if self.info_gain > self.warn_gain:
            raise ValueError("Thresholds.info_gain must not exceed warn_gain; lower info_gain")
        if self.bf16_speedup < 1 or self.tf32_speedup < 1:
            raise ValueError("speed-ups are ratios >= 1; use 1.0 for 'no gain'")


__all__ = ["MIB", "Thresholds"]
