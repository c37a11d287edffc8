"""The caching allocator's own cost: memory handed back to CUDA and asked for again every step.

``torch.cuda.empty_cache()`` releases every cached block; the next step's tensors then come from
``cudaMalloc`` again, and ``cudaFree`` waits for the whole GPU first. The profiler window times
both calls on the host (``cudaMalloc``/``cudaFree`` and their async forms); their time per step,
while the GPU waits, is what the step pays (``WindowSummary.alloc_ms``). With no ``empty_cache()`` calls, the same time comes
from an allocator that cannot reuse its blocks (shapes that change every step).
"""

from __future__ import annotations

from gpudoctor.analysis.facts import RankFacts, RunFacts
from gpudoctor.analysis.prescription import ms, pct, performance_finding, worst_rank
from gpudoctor.analysis.thresholds import Thresholds
from gpudoctor.records.finding import Finding

CODE_EMPTY_CACHE = "GD-RUN-EMPTY-CACHE"

def allocator_ms(rf: RankFacts) -> float | None:
    """Host time per step in the allocator's CUDA calls (``None`` without a window)."""
    w = rf.window
    if w is None or not rf.window_steps:
        return None
    return w.alloc_ms / rf.window_steps


def check_allocator_churn(facts: RunFacts, th: Thresholds) -> list[Finding]:
    """Memory released and re-allocated every step, costed from the window."""
    if not facts.on_gpu:
        return []
    return worst_rank(facts.ranks, lambda rf: _churn(rf, th), lambda rf: rf.rank)


def _churn(rf: RankFacts, th: Thresholds) -> list[Finding]:
    calls = rf.stats.empty_cache_calls
    cost = allocator_ms(rf)
    step = rf.breakdown.step_ms
    if cost is None or step <= 0 or rf.busy_frac is None:
        return []
    idle = max(0.0, 1.0 - rf.busy_frac)
    evidence = [f"rank {rf.rank}: {ms(cost)} a step in cudaMalloc/cudaFree (profiler window, host time) "
                f"of a {ms(step)} mean step, the GPU idle {pct(idle)} of it"]
    if calls >= 1:
        evidence.insert(0, f"torch.cuda.empty_cache() {calls:.0f} time(s) every step: the next step "
                           "allocates its tensors from CUDA again, and cudaFree waits for the GPU")
        title = (f"torch.cuda.empty_cache() every step: allocating memory again costs "
                 f"{pct(min(cost / step, idle))} of the step")
        fix = ("# the cache is what makes allocation cheap: do not empty it in the loop\n"
               "# (it frees no memory your tensors hold, so it fixes no leak and no OOM)\n"
               "# if memory is tight, let the allocator grow segments instead:\n"
               "#   PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True python train.py")
    else:
        title = (f"The caching allocator re-allocates every step: cudaMalloc/cudaFree cost "
                 f"{pct(min(cost / step, idle))} of the step")
        fix = ("# blocks of a new size every step cannot be reused: pad inputs to a few fixed\n"
               "# shapes (buckets), and let segments grow instead of new ones:\n"
               "#   PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True python train.py")
    return performance_finding(code=CODE_EMPTY_CACHE, gain=min(cost / step, idle), thresholds=th,
                               title=title, evidence=evidence, fix=fix)


__all__ = ["CODE_EMPTY_CACHE", "allocator_ms", "check_allocator_churn"]
