"""Numerics: NaN/inf losses and a GradScaler whose scale collapses or skips many steps."""

from __future__ import annotations

from gpudoctor.analysis.facts import RankFacts, RunFacts
from gpudoctor.analysis.prescription import pct, worst_rank
from gpudoctor.analysis.thresholds import Thresholds
from gpudoctor.records.finding import Finding, Severity

CODE_NONFINITE = "GD-RUN-NONFINITE-LOSS"
CODE_SCALER = "GD-RUN-SCALER-COLLAPSE"


def check_nonfinite_loss(facts: RunFacts, th: Thresholds) -> list[Finding]:
    """The loss was NaN or inf on some steps (warm-up included: a NaN is never noise)."""
    bad = {rf.rank: rf.stats.nonfinite_steps for rf in facts.ranks if rf.stats.nonfinite_steps}
    if not bad:
        return []
    rank, steps = min(bad.items(), key=lambda kv: kv[1][0])
    total = next(rf.stats.n_total for rf in facts.ranks if rf.rank == rank)
    evidence = [f"rank {rank}: loss not finite on {len(steps)} of {total} steps, first at step "
                f"{steps[0]}"]
    if len(bad) > 1:
        evidence.append(f"ranks affected: {', '.join(str(r) for r in sorted(bad))}")
    return [Finding(
        code=CODE_NONFINITE, severity=Severity.ERROR,
        title=f"NaN/inf loss from step {steps[0]}: training is not learning",
        evidence=tuple(evidence),
        fix=(
            "# usual causes: learning rate too high, log/sqrt/div of 0, fp16 overflow, bad inputs\n"
            "optimizer = torch.optim.AdamW(model.parameters(), lr=lr / 10)  # try a lower LR first\n"
            "scaler.unscale_(optimizer)                                    # with AMP, before clipping\n"
            "torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm=1.0)\n"
            "# locate the first bad op (slow, debugging only):\n"
            "torch.autograd.set_detect_anomaly(True)"
        ),
        expected_gain=None,
    )]


def check_scaler(facts: RunFacts, th: Thresholds) -> list[Finding]:
    """The GradScaler's scale collapses, or it skips many optimizer steps (inf/NaN gradients)."""
    return worst_rank(facts.ranks, lambda rf: _scaler(rf, th), lambda rf: rf.rank)


def _scaler(rf: RankFacts, th: Thresholds) -> list[Finding]:
    s = rf.stats
    if not s.scaler_scales:
        return []
    low = min(s.scaler_scales)
    skip_frac = s.scaler_skips / s.n_used if s.n_used else 0.0
    collapsed = low < th.scaler_min_scale
    if not collapsed and skip_frac < th.scaler_max_skip_frac:
        return []
    evidence = [
        f"scale went from {s.scaler_scales[0]:g} to {s.scaler_scales[-1]:g} "
        f"(lowest {low:g}) over {s.n_used} steps after warm-up",
        f"optimizer steps skipped: {s.scaler_skips} of {s.n_used} ({pct(skip_frac)})",
    ]
    return [Finding(
        code=CODE_SCALER,
        severity=Severity.ERROR if collapsed else Severity.WARN,
        title=(f"GradScaler {'scale collapsed' if collapsed else 'skips many steps'}: "
               f"{pct(skip_frac)} of optimizer steps skipped for inf/NaN gradients"),
        evidence=tuple(evidence),
        fix=(
            "# gradients overflow fp16 at every scale: find the op (sqrt/log/div near 0,\n"
            "# a sum instead of a mean) or switch to bf16, which needs no GradScaler:\n"
            "with torch.autocast(\"cuda\", dtype=torch.bfloat16):\n"
            "    loss = criterion(model(x), y)\n"
            "loss.backward()\n"
            "# e.g. a safe norm: torch.sqrt((h * h).sum(-1) + 1e-6), or F.normalize(h, eps=1e-6)"
        ),
        expected_gain=None,
    )]


__all__ = ["CODE_NONFINITE", "CODE_SCALER", "check_nonfinite_loss", "check_scaler"]
