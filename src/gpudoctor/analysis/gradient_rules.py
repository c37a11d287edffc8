"""Gradient norms: exploding, non-finite or zero (seed 000 §6 Q8).

The probes record the global gradient norm the script's ``torch.nn.utils.clip_grad_norm_``
returns (``StepRecord.grad_norm``, read lazily: no added sync); a script that does not clip
records none, and these rules say nothing about it.
"""

from __future__ import annotations

import math

from gpudoctor.analysis.facts import RankFacts, RunFacts
from gpudoctor.analysis.prescription import worst_rank
from gpudoctor.analysis.steps import median
from gpudoctor.analysis.thresholds import Thresholds
from gpudoctor.records.finding import Finding, Severity

CODE_EXPLODING = "GD-RUN-GRAD-EXPLODING"
CODE_ZERO = "GD-RUN-GRAD-ZERO"

_FIX_EXPLODING = (
    "optimizer = torch.optim.AdamW(model.parameters(), lr=lr / 10)  # a lower LR, or a warm-up:\n"
    "sched = torch.optim.lr_scheduler.LinearLR(optimizer, start_factor=0.01, total_iters=1000)\n"
    "scaler.unscale_(optimizer)                                      # with AMP, before clipping\n"
    "norm = torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm=1.0)  # clip, not just measure\n"
    "# also: normalise inputs/targets; a sum-reduced loss scales with the batch (use a mean)"
)


def check_exploding(facts: RunFacts, th: Thresholds) -> list[Finding]:
    """The global gradient norm is NaN/inf (ERROR) or grows by more than
    ``grad_explode_factor`` over the steady steps (WARN): the run is diverging."""
    return worst_rank(facts.ranks, lambda rf: _exploding(rf, th), lambda rf: rf.rank)


def _quarters(norms: tuple[tuple[int, float], ...]) -> tuple[float, float] | None:
    finite = [n for _, n in norms if math.isfinite(n)]
    if len(finite) < 4:
        return None
    q = len(finite) // 4
    return median(finite[:q]) or 0.0, median(finite[-q:]) or 0.0


def _exploding(rf: RankFacts, th: Thresholds) -> list[Finding]:
    s = rf.stats
    if s.nonfinite_grad_steps:
        bad = s.nonfinite_grad_steps
        finite = [n for step, n in s.grad_norms if step < bad[0]]
        evidence = [f"rank {rf.rank}: clip_grad_norm_ returned a NaN/inf norm on {len(bad)} step(s), "
                    f"first at step {bad[0]}"]
        if finite:
            evidence.append(f"the last finite norm before it: {finite[-1]:.4g}")
        return [Finding(code=CODE_EXPLODING, severity=Severity.ERROR,
                        title=f"Gradient norm NaN/inf from step {bad[0]}: the run diverged",
                        evidence=tuple(evidence), fix=_FIX_EXPLODING, expected_gain=None)]
    quarters = _quarters(s.grad_norms)
    if quarters is None:
        return []
    head, tail = quarters
    if head <= 0 or tail <= th.grad_explode_factor * head:
        return []
    first, last = s.grad_norms[0], s.grad_norms[-1]
    return [Finding(
        code=CODE_EXPLODING, severity=Severity.WARN,
        title=f"Gradient norm grows {tail / head:.0f}x over the run: training is diverging",
        evidence=(
            f"rank {rf.rank}: global gradient norm (clip_grad_norm_) median {head:.4g} over the first "
            f"quarter of the steady steps, {tail:.4g} over the last "
            f"(step {first[0]}: {first[1]:.4g}, step {last[0]}: {last[1]:.4g})",
        ),
        fix=_FIX_EXPLODING, expected_gain=None,
    )]


def check_zero(facts: RunFacts, th: Thresholds) -> list[Finding]:
    """The global gradient norm is exactly 0 on every steady step: nothing learns."""
    return worst_rank(facts.ranks, lambda rf: _zero(rf, th), lambda rf: rf.rank)


def _zero(rf: RankFacts, th: Thresholds) -> list[Finding]:
    norms = rf.stats.grad_norms
    if len(norms) < th.min_steps or any(n != 0.0 for _, n in norms):
        return []
    return [Finding(
        code=CODE_ZERO, severity=Severity.WARN,
        title="Gradient norm is 0 on every step: the optimizer updates nothing",
        evidence=(f"rank {rf.rank}: clip_grad_norm_ returned 0 on all {len(norms)} steady steps "
                  f"(steps {norms[0][0]}-{norms[-1][0]})",),
        fix=("# usual causes: the loss is detached from the model (.item(), .detach(), torch.no_grad()),\n"
             "# frozen parameters, or every activation dead (ReLU after a large negative bias)\n"
             "loss = criterion(model(x), y)              # a tensor with grad_fn, not a float\n"
             "assert loss.requires_grad\n"
             "print([n for n, p in model.named_parameters() if p.grad is None or not p.grad.any()])"),
        expected_gain=None,
    )]


__all__ = ["CODE_EXPLODING", "CODE_ZERO", "check_exploding", "check_zero"]
