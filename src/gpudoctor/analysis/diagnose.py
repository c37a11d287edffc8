"""Run every rule over a loaded run directory and order the findings.

Order: first what makes the run *wrong* or will stop it (findings with no step-time gain at WARN or
ERROR: NaN loss, ranks sharing a GPU, a leak, ...), most severe first, because speeding up a run
that learns nothing or will crash gains nothing; then the performance findings by expected gain
(:func:`gpudoctor.records.finding.rank_findings`); then the remaining notes.
"""

from __future__ import annotations

from collections.abc import Callable

from gpudoctor.analysis import (
    allocator_rules,
    compile_rules,
    compute_rules,
    copy_rules,
    conv_rules,
    distributed_rules,
    grad_sync_rules,
    gradient_rules,
    host_rules,
    input_rules,
    memory_rules,
    numerics_rules,
    pcie_rules,
    run_rules,
    stall_rules,
    sync_rules,
    tail_rules,
    transfer_rules,
    trend_rules,
)
from gpudoctor.analysis.facts import RunFacts, run_facts
from gpudoctor.analysis.memory_leak_sites import name_leak_sites
from gpudoctor.analysis.thresholds import Thresholds
from gpudoctor.records.finding import Finding, Severity, rank_findings
from gpudoctor.records.rundir import RunData

Rule = Callable[[RunFacts, Thresholds], list[Finding]]

RULES: tuple[Rule, ...] = (
    input_rules.check_data_loader,
    transfer_rules.check_per_sample_copies,
    transfer_rules.check_pageable,
    sync_rules.check_host_sync,
    compute_rules.check_launch_bound,
    compute_rules.check_fp32_compute,
    conv_rules.check_channels_last,
    conv_rules.check_cudnn_benchmark,
    tail_rules.check_periodic_stalls,
    host_rules.check_host_ops,
    compile_rules.check_recompiles,
    trend_rules.check_slowdown,
    memory_rules.check_leak,
    memory_rules.check_fragmentation,
    allocator_rules.check_allocator_churn,
    memory_rules.check_headroom,
    numerics_rules.check_nonfinite_loss,
    numerics_rules.check_scaler,
    gradient_rules.check_exploding,
    gradient_rules.check_zero,
    distributed_rules.check_set_epoch,
    distributed_rules.check_dist_sampler,
    distributed_rules.check_data_parallel,
    grad_sync_rules.check_manual_allreduce,
    distributed_rules.check_same_gpu,
    distributed_rules.check_comm_exposed,
    distributed_rules.check_straggler,
    run_rules.check_cpu_only,
)

# correctness findings: the cause before its symptoms (a shared GPU before the crash it causes)
CORRECTNESS_ORDER = (
    distributed_rules.CODE_SAME_GPU,
    numerics_rules.CODE_NONFINITE,
    gradient_rules.CODE_EXPLODING,
    gradient_rules.CODE_ZERO,
    numerics_rules.CODE_SCALER,
    memory_rules.CODE_LEAK,
    memory_rules.CODE_FRAG,
    distributed_rules.CODE_NO_DIST_SAMPLER,
    grad_sync_rules.CODE_DOUBLE_ALLREDUCE,
    distributed_rules.CODE_SET_EPOCH,
    distributed_rules.CODE_DATA_PARALLEL,
    run_rules.CODE_CRASHED,
    run_rules.CODE_NO_STEPS,
)


def _is_correctness(finding: Finding) -> bool:
    return finding.expected_gain is None and finding.severity is not Severity.INFO


def order_findings(findings: list[Finding]) -> list[Finding]:
    """Correctness findings first (severity, then cause before symptom), then by expected gain."""
    first = [f for f in findings if _is_correctness(f)]
    rest = [f for f in findings if not _is_correctness(f)]

    def key(f: Finding) -> tuple[int, int, str]:
        pos = CORRECTNESS_ORDER.index(f.code) if f.code in CORRECTNESS_ORDER else len(CORRECTNESS_ORDER)
        return (-f.severity.rank, pos, f.code)

    return sorted(first, key=key) + rank_findings(rest)


def diagnose(run: RunData, *, thresholds: Thresholds | None = None) -> list[Finding]:
    """Diagnose a run: every rule over its records, ordered as the module docstring says.

    Pure: reads only ``run``; no I/O, no torch. On a CPU-only run the GPU rules say nothing and a
    ``GD-RUN-CPU-ONLY`` note says so.
    """
    th = thresholds or Thresholds()
    facts = run_facts(run, th)
    findings = run_rules.check_run_status(run.manifest, facts, th)
    stall = stall_rules.check_stall(run, th)
    if stall:  # where it was stuck says more than "no step was recorded"
        findings = [f for f in findings if f.code != run_rules.CODE_NO_STEPS]
    findings.extend(stall)
    for rule in RULES:
        findings.extend(rule(facts, th))
    copies = copy_rules.check_copy_bound(facts, th, run.copy_ceiling_gbs)
    findings.extend(copies)
    if not copies:  # the timeline's copy finding says all the demand figure would
        findings.extend(pcie_rules.check_pcie_demand(facts, run.copy_ceiling_gbs))  # with bench copy's figure
    # the sites a leak grew, when the probes recorded them (memory run, or run once a leak showed)
    sites = next((s for _, s in sorted(run.leak_sites.items()) if s.sites), None)
    return order_findings(name_leak_sites(findings, sites, memory_rules.CODE_LEAK))


__all__ = ["CORRECTNESS_ORDER", "RULES", "diagnose", "order_findings"]
