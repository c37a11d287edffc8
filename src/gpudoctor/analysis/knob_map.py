"""Which ``--try`` knobs verify which finding: the prescription as something gpudoctor can test.

Only findings whose fix can be injected safely into an unmodified script map to knobs; the rest
(an ``.item()`` per step, a leak through a kept graph) need an edit and are not re-run.
"""

from __future__ import annotations

from gpudoctor.records.finding import Finding


def loader_workers(cpu_count: int, world_size: int = 1) -> int:
    """DataLoader workers per rank: the cores this rank can use, one left for the main process,
    at most 8 (past that, workers mostly add start-up time and RAM)."""
    per_rank = max(cpu_count // max(world_size, 1), 1)
    return max(1, min(8, per_rank - 1))


def knobs_for(finding: Finding, *, cpu_count: int, world_size: int = 1) -> str | None:
    """The ``--try`` knob string that tests ``finding``'s fix, or ``None`` when none can."""
    code = finding.code
    if code == "GD-RUN-DATALOADER":
        workers = loader_workers(cpu_count, world_size)
        return f"num_workers={workers},pin_memory,persistent_workers,prefetch_factor=4"
    if code in ("GD-RUN-H2D-PAGEABLE",):
        return "pin_memory"
    if code == "GD-RUN-FP32-COMPUTE":
        return "tf32,cudnn_benchmark"
    if code == "GD-RUN-FRAGMENTATION":
        return "expandable_segments"
    return None


def first_testable(findings: list[Finding], *, cpu_count: int, world_size: int = 1
                   ) -> tuple[Finding, str] | None:
    """The highest-ranked finding whose fix can be tried, with its knobs."""
    for finding in findings:
        if finding.severity.value == "info":
            continue
        knobs = knobs_for(finding, cpu_count=cpu_count, world_size=world_size)
        if knobs is not None:
            return finding, knobs
    return None
