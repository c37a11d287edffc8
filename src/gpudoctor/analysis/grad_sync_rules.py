"""Gradients reduced twice: a manual ``dist.all_reduce`` of ``p.grad`` on a DDP model (pure)."""

from __future__ import annotations

from gpudoctor.analysis.thresholds import Thresholds
from gpudoctor.records.finding import Finding, Severity
from gpudoctor.records.units import human_bytes

CODE_DOUBLE_ALLREDUCE = "GD-RUN-GRAD-REDUCED-TWICE"


def check_manual_allreduce(facts, th: Thresholds) -> list[Finding]:
    """A DDP model whose parameter gradients the script also all-reduces by hand, outside
    ``backward()`` (seed 001 §5, 000 §5.3): DDP has averaged them already, so every such call
    sends the gradient again, and a loop that then divides by the world size shrinks the update
    by that factor. Correctness first (the learning rate changes silently), then time.
    """
    for rank, cfg in sorted(facts.configs.items()):
        ddp = cfg.ddp
        if ddp is None or ddp.kind != "ddp" or ddp.manual_grad_allreduces <= 0:
            continue
        evidence = [
            f"rank {rank}: {ddp.manual_grad_allreduces} dist.all_reduce call(s) on the DDP model's own "
            f"parameter gradients after backward(), {human_bytes(ddp.manual_grad_allreduce_bytes)} in all, "
            f"from step {ddp.manual_grad_allreduce_first_step}",
            "DDP all-reduces (averages) every gradient during backward(): these are a second reduction",
        ]
        return [Finding(
            code=CODE_DOUBLE_ALLREDUCE, severity=Severity.WARN,
            title="Gradients all-reduced twice: DDP already averaged them, the script reduces them again",
            evidence=tuple(evidence),
            fix=(
                "# DDP averages the gradients inside loss.backward(); delete the manual loop:\n"
                "# for p in model.parameters():\n"
                "#     dist.all_reduce(p.grad); p.grad /= world_size      # <- remove\n"
                "loss.backward()\n"
                "optimizer.step()"
            ),
            expected_gain=None,
        )]
    return []
