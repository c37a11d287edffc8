"""Device memory: leaks, fragmentation, and headroom left unused while the GPU is not saturated."""

from __future__ import annotations

from gpudoctor.analysis.facts import RankFacts, RunFacts
from gpudoctor.analysis.memory_leak_sites import LEAK_FIND, LEAK_HOLDERS
from gpudoctor.analysis.prescription import pct, worst_rank
from gpudoctor.analysis.thresholds import Thresholds
from gpudoctor.records.finding import Finding, Severity
from gpudoctor.records.units import human_bytes

CODE_LEAK = "GD-RUN-MEM-LEAK"
CODE_FRAG = "GD-RUN-FRAGMENTATION"
CODE_HEADROOM = "GD-RUN-MEM-HEADROOM"


def total_memory(facts: RunFacts, rf: RankFacts) -> int | None:
    """The rank's GPU memory: from its config, else from the NVML samples of its device."""
    if rf.config is not None and rf.config.gpu_total_memory_bytes:
        return rf.config.gpu_total_memory_bytes
    index = rf.config.cuda_device_index if rf.config is not None else None
    for gpu in facts.gpus:
        if (index is None or gpu.index == index) and gpu.mem_total_bytes:
            return gpu.mem_total_bytes
    return None


def check_leak(facts: RunFacts, th: Thresholds) -> list[Finding]:
    """Allocated memory grows step over step after warm-up: something keeps tensors alive.

    No step-time gain: the cost is an OOM later, so the finding ranks with the correctness ones.
    """
    return worst_rank(facts.ranks, lambda rf: _leak(facts, rf, th), lambda rf: rf.rank)


def _leak(facts: RunFacts, rf: RankFacts, th: Thresholds) -> list[Finding]:
    s = rf.stats
    fit = s.leak
    if fit is None or s.alloc_first_bytes is None or s.alloc_last_bytes is None:
        return []
    growth = s.alloc_last_bytes - s.alloc_first_bytes
    if (fit.slope < th.leak_min_bytes_per_step or fit.r2 < th.leak_min_r2
            or growth < th.leak_min_growth_frac * max(s.alloc_first_bytes, 1)):
        return []
    evidence = [
        f"allocated grew from {human_bytes(s.alloc_first_bytes)} to "
        f"{human_bytes(s.alloc_last_bytes)} over {s.n_used} steps after warm-up: "
        f"+{human_bytes(fit.slope)} per step (least squares, R^2 {fit.r2:.2f}), rank {rf.rank}",
    ]
    total = total_memory(facts, rf)
    severity = Severity.WARN
    if total:
        left = total - (s.peak_reserved_bytes or s.alloc_last_bytes)
        steps_left = max(0, int(left / fit.slope))
        evidence.append(f"at this rate the {human_bytes(total)} GPU is full in about "
                        f"{steps_left} more steps")
        if steps_left < th.leak_error_steps:
            severity = Severity.ERROR
    return [Finding(
        code=CODE_LEAK, severity=severity,
        title=f"Memory leak: allocated memory grows {human_bytes(fit.slope)} every step",
        evidence=tuple(evidence),
        fix=f"{LEAK_HOLDERS}\n{LEAK_FIND}",
        expected_gain=None,
    )]


def check_fragmentation(facts: RunFacts, th: Thresholds) -> list[Finding]:
    """The caching allocator reserves much more than tensors use at the peak, or retries allocations.

    No step-time gain is claimed (a retry frees the cache and synchronises, its cost is not
    measured per step); the risk is an OOM with free memory in ``nvidia-smi``.
    """
    if not facts.on_gpu:
        return []
    return worst_rank(facts.ranks, lambda rf: _fragmentation(rf, th), lambda rf: rf.rank)


def _fragmentation(rf: RankFacts, th: Thresholds) -> list[Finding]:
    s = rf.stats
    if s.peak_reserved_bytes is None or s.peak_allocated_bytes is None:
        return []
    waste = s.peak_reserved_bytes - s.peak_allocated_bytes
    waste_frac = waste / s.peak_reserved_bytes if s.peak_reserved_bytes else 0.0
    big_gap = waste_frac >= th.frag_min_waste_frac and waste >= th.frag_min_waste_bytes
    if s.alloc_retries == 0 and not big_gap:
        return []
    conf = rf.config.alloc_conf if rf.config is not None else ""
    evidence = [
        f"peak reserved {human_bytes(s.peak_reserved_bytes)} vs peak allocated "
        f"{human_bytes(s.peak_allocated_bytes)}: {human_bytes(waste)} ({pct(waste_frac)}) "
        "held by the allocator but never used at the peak",
        f"allocation retries after warm-up: {s.alloc_retries}; OOMs: {s.ooms}",
        f"PYTORCH_CUDA_ALLOC_CONF={conf or '(unset)'}",
    ]
    if "expandable_segments:True" in conf:
        fix = ("# expandable segments are on already: lower the peak instead\n"
               "#  - smaller batch with gradient accumulation\n"
               "#  - torch.utils.checkpoint on the largest blocks\n"
               "#  - keep tensor shapes fixed between steps (pad variable lengths to buckets)")
    else:
        fix = ("export PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True   # before the script starts\n"
               "# segments grow in place instead of splitting into unusable pieces;\n"
               "# also: keep shapes fixed between steps (pad variable lengths to buckets)")
    return [Finding(
        code=CODE_FRAG,
        severity=Severity.WARN if s.alloc_retries else Severity.INFO,
        title=(f"Allocator fragmentation: {s.alloc_retries} allocation retries, "
               f"{human_bytes(waste)} reserved but unused at the peak"),
        evidence=tuple(evidence), fix=fix, expected_gain=None,
    )]


def check_headroom(facts: RunFacts, th: Thresholds) -> list[Finding]:
    """Most of the GPU's memory unused while the GPU is not saturated and not waiting for data."""
    if not facts.on_gpu or not facts.ranks:
        return []
    rf = facts.ranks[0]
    busy = rf.busy_frac
    total = total_memory(facts, rf)
    peak = rf.stats.peak_reserved_bytes
    if busy is None or total is None or not peak or busy >= th.headroom_max_busy:
        return []
    if facts.ran_out_of_memory:
        return []  # it ran out of memory: whatever the steady steps used, there is no room
    if rf.stats.data_wait_share >= th.data_wait_min_share:
        return []  # a bigger batch would wait for data just the same
    frac = peak / total
    if frac >= th.headroom_max_mem_frac:
        return []
    factor = int(th.headroom_target_mem_frac * total / peak)
    return [Finding(
        code=CODE_HEADROOM, severity=Severity.INFO,
        title=f"Memory headroom: {pct(frac)} of GPU memory used while the GPU is busy {pct(busy)}",
        evidence=(
            f"peak reserved {human_bytes(peak)} of {human_bytes(total)}",
            f"GPU busy {pct(busy)} of the step"
            + (f", batch size {rf.stats.samples:.0f}" if rf.stats.samples else ""),
        ),
        fix=(f"# room for a batch up to ~{factor}x larger (scale the learning rate with it,\n"
             "# or find the largest that fits with `gpudoctor tune`)\n"
             "loader = DataLoader(ds, batch_size=2 * B, ...)"),
        expected_gain=None,
    )]


__all__ = ["CODE_FRAG", "CODE_HEADROOM", "CODE_LEAK", "check_fragmentation", "check_headroom",
           "check_leak", "total_memory"]
