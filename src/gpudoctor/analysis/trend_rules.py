"""Training that slows down over time (seed 000 §6 Q5).

A run whose steps get steadily longer loses more the longer it runs, and a median over the run
hides it. The probes record every step's time, so the step-time trend over the steady steps
(:class:`gpudoctor.analysis.steps.StepTrend`, a least-squares line against the step index) shows
it. The usual causes, which the evidence checks where the records can:

- ``torch.compile`` recompiling (dynamo's frame counter per step, ``GD-RUN-RECOMPILE``);
- memory that grows: a Python list that keeps tensors (``losses.append(loss)``) grows the GPU's
  allocated memory (``GD-RUN-MEM-LEAK``) and the autograd graphs they hold; DataLoader workers
  whose resident memory grows as they touch a dataset of Python objects (copy-on-read), seen in
  the host samples of the process tree;
- a data wait that grows (the loader falls behind as its workers' memory grows or swaps).
"""

from __future__ import annotations

from gpudoctor.analysis.facts import RankFacts, RunFacts, main_loader
from gpudoctor.analysis.prescription import ms, pct, performance_finding, worst_rank
from gpudoctor.analysis.thresholds import Thresholds
from gpudoctor.analysis.utilization import BytesTrend
from gpudoctor.records.finding import Finding
from gpudoctor.records.units import human_bytes

CODE_SLOWDOWN = "GD-RUN-SLOWDOWN"

PROJECT_STEPS = 1000  # the evidence projects the trend this many steps past the last one


def check_slowdown(facts: RunFacts, th: Thresholds) -> list[Finding]:
    """Steps that grow steadily over the run.

    Fires when the fitted step time grows by ``slowdown_min_growth`` of the first fitted steady
    step with R^2 >= ``slowdown_min_r2``, over at least ``slowdown_min_steps`` steady steps.
    Expected gain = the share of the recorded steady steps' (fitted) time spent beyond the first
    fitted step: what the run would have saved at its starting speed. It grows with the run's
    length, so a finding that is INFO over 60 recorded steps is worse over a whole training run:
    the evidence projects the step time ``PROJECT_STEPS`` steps further.
    """
    return worst_rank(facts.ranks, lambda rf: _slowdown(rf, facts, th), lambda rf: rf.rank)


def _slowdown(rf: RankFacts, facts: RunFacts, th: Thresholds) -> list[Finding]:
    t = rf.stats.trend
    if t is None or rf.stats.n_used < th.slowdown_min_steps:
        return []
    if t.growth_frac < th.slowdown_min_growth or t.fit.r2 < th.slowdown_min_r2:
        return []
    if t.late_slope is None or t.late_slope < th.slowdown_min_late_slope * t.fit.slope:
        return []  # levelled off: a warm-up longer than the warm-up drop, not a slow-down
    per_100 = 100.0 * t.fit.slope
    later = t.start_ms + t.fit.slope * (t.last_step - t.first_step + PROJECT_STEPS)
    evidence = [
        f"rank {rf.rank}: the fitted step time went from {ms(t.start_ms)} at step {t.first_step} "
        f"to {ms(t.start_ms + t.growth_ms)} at step {t.last_step} (+{pct(t.growth_frac)}, "
        f"{per_100:+.2f} ms per 100 steps, R² {t.fit.r2:.2f} over the medians of {t.windows} windows "
        f"of the {rf.stats.n_used} steady steps)",
        f"it cost {pct(t.lost_share)} of the recorded steps' time; at this rate a step takes "
        f"{ms(later)} {PROJECT_STEPS} steps later",
        *_causes(rf, facts, th),
    ]
    return performance_finding(
        code=CODE_SLOWDOWN, gain=t.lost_share, thresholds=th,
        title=f"Training slows down over time: {per_100:+.2f} ms per 100 steps "
              f"(+{pct(t.growth_frac)} over the run)",
        evidence=evidence,
        fix=(
            "losses.append(loss.item())          # not loss: a kept tensor keeps its graph and memory\n"
            "# recompilations: TORCH_LOGS=recompiles python train.py; drop_last=True; dynamic=True\n"
            "# worker memory: keep the dataset's index in numpy arrays or tensors, not Python lists\n"
            "#   of objects (copy-on-read), and/or persistent_workers=False so workers restart\n"
            "# watch the whole run: gpudoctor run --full -- python train.py"
        ),
    )


def _causes(rf: RankFacts, facts: RunFacts, th: Thresholds) -> list[str]:
    """What the records say about each cause the seed lists."""
    s = rf.stats
    out = []
    if s.recompile_steps:
        out.append(f"torch.compile compiled {s.recompiles} frame(s) in {len(s.recompile_steps)} steady "
                   "step(s): see GD-RUN-RECOMPILE")
    elif rf.config is not None and rf.config.compiled:
        out.append("torch.compile did not recompile in the steady steps")
    if s.leak is not None and s.alloc_first_bytes is not None:
        grows = s.leak.slope >= th.leak_min_bytes_per_step and s.leak.r2 >= th.leak_min_r2
        out.append(f"GPU allocated memory {'grows' if grows else 'is flat'}: "
                   f"{human_bytes(s.alloc_first_bytes)} -> {human_bytes(s.alloc_last_bytes)}"
                   + (" (a list keeping tensors? see GD-RUN-MEM-LEAK)" if grows else ""))
    out.append(_host_line(facts.host_memory, rf, th))
    return out


def _host_line(host: BytesTrend | None, rf: RankFacts, th: Thresholds) -> str:
    loader = main_loader(rf.config)
    workers = loader.num_workers if loader is not None else 0
    if host is None:
        return "host memory of the process tree: no host sample during the steady steps"
    growth = host.last_bytes - host.first_bytes
    grows = (host.fit.r2 >= th.leak_min_r2 and host.first_bytes > 0
             and host.fit.slope * host.span_s >= th.leak_min_growth_frac * host.first_bytes)
    line = (f"host memory of the process tree {'grows' if grows else 'does not grow'}: "
            f"{human_bytes(host.first_bytes)} -> {human_bytes(host.last_bytes)} over {host.span_s:.0f} s")
    if grows:
        line += f" ({human_bytes(max(0, growth))}, {human_bytes(max(0.0, host.bytes_per_min))}/min)"
        line += (f"; with {workers} DataLoader worker(s): worker memory growth (copy-on-read)?"
                 if workers else "; a Python list keeping tensors or batches?")
    return line


__all__ = ["CODE_SLOWDOWN", "check_slowdown"]
