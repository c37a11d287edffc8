"""Training that slows down over time: the step-time trend rule on hand-built runs."""

from __future__ import annotations

import dataclasses
import random

from gpudoctor.analysis.diagnose import diagnose
from gpudoctor.analysis.facts import run_facts
from gpudoctor.analysis.thresholds import Thresholds
from gpudoctor.records.finding import Severity
from gpudoctor.records.gpu import HostSample

CODE = "GD-RUN-SLOWDOWN"


def by_code(findings):
    return {f.code: f for f in findings}


def noisy(base, per_step, seed=0, noise=2.0):
    rng = random.Random(seed)
    noise_by_step = [rng.uniform(-noise, noise) for _ in range(1000)]
    return lambda i: base + per_step * i + noise_by_step[i]


def test_steady_growth_is_named_with_its_trend(build):
    # 40 ms growing 0.2 ms per step (+20 ms over the 54 steady steps), +-2 ms noise
    run = build.run(steps_by_rank={0: build.steps(n=60, step_ms=noisy(40.0, 0.2))})
    trend = run_facts(run, Thresholds()).ranks[0].stats.trend
    assert 0.18 < trend.fit.slope < 0.22 and trend.fit.r2 > 0.8
    assert (trend.first_step, trend.last_step) == (6, 59)
    f = by_code(diagnose(run))[CODE]
    per_100 = 100 * trend.fit.slope
    assert f.title == f"Training slows down over time: {per_100:+.2f} ms per 100 steps (+{100 * trend.growth_frac:.1f}% over the run)"
    assert f.evidence[0].startswith(f"rank 0: the fitted step time went from {trend.start_ms:.2f} ms at step 6 to ")
    assert f"{per_100:+.2f} ms per 100 steps, R² {trend.fit.r2:.2f} over the medians of 9 windows of the 49 steady steps)" in f.evidence[0]  # profiler window left out
    # the cost: half the growth over the mean fitted step; WARN from 10%
    assert f.expected_gain == round(trend.lost_share, 4) and 0.10 < trend.lost_share < 0.13
    assert f.severity is Severity.WARN
    assert "GPU allocated memory is flat: 2.0 GiB -> 2.0 GiB" in f.evidence
    assert "host memory of the process tree: no host sample during the steady steps" in f.evidence
    assert "losses.append(loss.item())" in f.fix


def test_a_slower_climb_is_a_note(build):
    run = build.run(steps_by_rank={0: build.steps(n=60, step_ms=noisy(40.0, 0.1, noise=0.5))})
    f = by_code(diagnose(run))[CODE]
    assert f.severity is Severity.INFO and 0.03 <= f.expected_gain < 0.10


def test_flat_noisy_run_is_silent(build):
    for seed in range(20):
        run = build.run(steps_by_rank={0: build.steps(n=60, step_ms=noisy(40.0, 0.0, seed=seed, noise=8.0))})
        assert CODE not in by_code(diagnose(run)), seed


def test_short_or_weak_trends_are_silent(build):
    # growth below 10% of the first fitted step
    small = build.run(steps_by_rank={0: build.steps(n=60, step_ms=noisy(40.0, 0.05, noise=0.1))})
    assert CODE not in by_code(diagnose(small))
    # too few steady steps to judge a line
    short = build.run(steps_by_rank={0: build.steps(n=20, step_ms=lambda i: 40.0 + 2.0 * i)})
    assert run_facts(short, Thresholds()).ranks[0].stats.n_used < Thresholds().slowdown_min_steps
    assert CODE not in by_code(diagnose(short))
    # a few slow steps at the end are not a climb (R² under 0.5)
    jump = build.run(steps_by_rank={0: build.steps(n=60, step_ms=lambda i: 80.0 if i in (30, 59) else 40.0)})
    assert CODE not in by_code(diagnose(jump))


def test_causes_the_records_show(build):
    steps = build.steps(n=60, step_ms=noisy(40.0, 0.3), compiles=lambda i: 1 if i in (20, 40) else 0,
                        mem=lambda i: build.mem(allocated=2 * build.GIB + i * 8 * build.MIB))
    cfg = build.config(compiled=True, loaders=(build.loader(num_workers=4),))
    run = build.run(steps_by_rank={0: steps}, configs={0: cfg})
    t0 = steps[6].t_end_s
    host = [HostSample(timestamp_s=t0 + 0.2 * k, tree_rss_bytes=4 * build.GIB + k * 64 * build.MIB)
            for k in range(11)]
    run = dataclasses.replace(run, host=host + [HostSample(timestamp_s=t0 - 5, tree_rss_bytes=build.MIB)])
    f = by_code(diagnose(run))[CODE]
    assert "torch.compile compiled 2 frame(s) in 2 steady step(s): see GD-RUN-RECOMPILE" in f.evidence
    assert "GPU allocated memory grows: 2.0 GiB -> 2.5 GiB (a list keeping tensors? see GD-RUN-MEM-LEAK)" in f.evidence
    # the start-up reading before the steady steps is left out of the host trend
    assert ("host memory of the process tree grows: 4.0 GiB -> 4.6 GiB over 2 s (640.0 MiB, "
            "18.8 GiB/min); with 4 DataLoader worker(s): worker memory growth (copy-on-read)?") in f.evidence


def test_worst_rank_is_named(build):
    run = build.run(steps_by_rank={0: build.steps(rank=0, n=60, step_ms=noisy(40.0, 0.0, noise=0.5)),
                                   1: build.steps(rank=1, n=60, step_ms=noisy(40.0, 0.3, seed=1))},
                    configs={0: build.config(0, world_size=2), 1: build.config(1, world_size=2)},
                    windows={0: build.window(0), 1: build.window(1)})
    f = by_code(diagnose(run))[CODE]
    assert f.evidence[0].startswith("rank 1: ") and f.evidence[-1] == "rank 1 of 2 is the worst; the other ranks do not show it"


def test_a_warm_up_that_levels_off_is_not_a_slow_down(build):
    # pytorch/examples' vae on an H200: 8 ms steps climbing to 13 ms over the first 30 steps,
    # then flat at 13 ms: the fitted line rises, its later half does not
    run = build.run(steps_by_rank={0: build.steps(n=60, step_ms=lambda i: 8.0 + 5.0 * min(i, 30) / 30)})
    t = run_facts(run, Thresholds()).ranks[0].stats.trend
    assert t.growth_frac > 0.10 and t.fit.r2 > 0.5 and t.late_slope < 0.25 * t.fit.slope
    assert CODE not in by_code(diagnose(run))
