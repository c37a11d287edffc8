"""``torch.compile`` recompiling during training.

TorchDynamo compiles a frame again when a guard fails: a new input shape (the last, smaller
batch of an epoch), a Python number that changes (a learning rate or a step counter passed as a
float), a new dtype. Each recompilation stalls the step for seconds, and past
``torch._dynamo.config.recompile_limit`` (8) frames the function silently falls back to eager.
The probes count the frames compiled in every step (``StepRecord.compiles``); compiling after
warm-up is recompiling. Seed 000 §6 Q5: training that slows down with ``torch.compile``.
"""

from __future__ import annotations

from gpudoctor.analysis.facts import RankFacts, RunFacts
from gpudoctor.analysis.prescription import ms, pct, worst_rank
from gpudoctor.analysis.thresholds import Thresholds
from gpudoctor.records.finding import Finding, Severity

CODE_RECOMPILE = "GD-RUN-RECOMPILE"


def check_recompiles(facts: RunFacts, th: Thresholds) -> list[Finding]:
    """``torch.compile`` compiled frames in steady steps.

    Expected gain = those steps' time beyond the median step, over the steady steps' total time.
    WARN from ``warn_gain`` or when it recompiles in several steps (it will keep doing so, and
    hits the recompile limit); else INFO.
    """
    return worst_rank(facts.ranks, lambda rf: _recompiles(rf, th), lambda rf: rf.rank)


def _recompiles(rf: RankFacts, th: Thresholds) -> list[Finding]:
    s = rf.stats
    if not s.recompile_steps:
        return []
    gain = s.recompile_ms / s.total_ms if s.total_ms > 0 else 0.0
    repeated = len(s.recompile_steps) >= 2
    severity = Severity.WARN if gain >= th.warn_gain or repeated else Severity.INFO
    steps = ", ".join(map(str, s.recompile_steps[:6])) + (", ..." if len(s.recompile_steps) > 6 else "")
    return [Finding(
        code=CODE_RECOMPILE, severity=severity,
        title=f"torch.compile recompiled {s.recompiles} frame(s) after warm-up, costing "
              f"{pct(gain)} of the run",
        evidence=(
            f"frames compiled in steady steps {steps}, rank {rf.rank}; those steps took "
            f"{ms(s.recompile_ms)} more than the median {ms(s.step_ms)}",
            "each recompilation stalls the step; past torch._dynamo.config.recompile_limit "
            "(default 8) the function runs eagerly without a warning",
        ),
        fix=("# see why: TORCH_LOGS=recompiles python train.py\n"
             "loader = DataLoader(ds, batch_size=B, drop_last=True)  # no smaller last batch\n"
             "model = torch.compile(model, dynamic=True)              # or: sizes that vary\n"
             "# pass changing numbers (lr, step) as tensors, not Python floats"),
        expected_gain=round(min(1.0, gain), 4) if gain >= th.info_gain else None,
    )]


__all__ = ["CODE_RECOMPILE", "check_recompiles"]
