"""Input copies near the measured host-to-device ceiling (pure).

The demand is what each rank copies host-to-device per second of its steps (the probes count the
bytes of every copy to the GPU); the ceiling is ``gpudoctor bench copy``'s pinned host-to-device
figure for this machine, when the run directory holds it (``bench.json``). The finding says how
much of each step the copies need at that rate: near the whole step, the input pipeline is
bounded by the PCIe link, whatever the loader does.
"""

from __future__ import annotations

from gpudoctor.analysis.facts import RunFacts
from gpudoctor.records.finding import Finding, Severity

CODE_PCIE_DEMAND = "GD-RUN-PCIE-DEMAND"

# name: (value, why) — this rule's thresholds, kept with the rule (not in analysis/thresholds.py)
THRESHOLDS = {
    "min_share": (0.5, "copies at the measured ceiling fill half of each step: the copy engine is busy "
                       "half the time, so a burst, a pageable copy or a neighbour on the same PCIe switch "
                       "stalls the input; below half there is slack to overlap"),
    "error_share": (0.9, "the copies alone need nearly the whole step: the step cannot get shorter than the "
                         "link allows"),
    "min_bytes_per_step": (1 << 20, "under 1 MiB per step copies are a few microseconds: nothing to gain"),
}


def check_pcie_demand(facts: RunFacts, ceiling_gbs: float | None) -> list[Finding]:
    """The rank whose copies need the largest share of its step at the measured ceiling."""
    if not ceiling_gbs or ceiling_gbs <= 0:
        return []
    worst = None
    for rf in facts.ranks:
        s = rf.stats
        if s.step_ms <= 0 or s.h2d_bytes < THRESHOLDS["min_bytes_per_step"][0]:
            continue
        copy_ms = s.h2d_bytes / (ceiling_gbs * 1e9) * 1e3
        share = copy_ms / s.step_ms
        if worst is None or share > worst[0]:
            worst = (share, copy_ms, rf)
    if worst is None or worst[0] < THRESHOLDS["min_share"][0]:
        return []
    share, copy_ms, rf = worst
    s = rf.stats
    demand = s.h2d_bytes / (s.step_ms / 1e3) / 1e9
    evidence = (
        f"rank {rf.rank}: {s.h2d_bytes / 1e6:,.1f} MB copied host-to-device per step of {s.step_ms:,.1f} ms "
        f"(median): {demand:,.1f} GB/s of demand",
        f"measured ceiling (gpudoctor bench copy, pinned host-to-device): {ceiling_gbs:,.1f} GB/s; at that "
        f"rate the copies take {copy_ms:,.1f} ms, {share:.0%} of the step",
    )
    return [Finding(
        code=CODE_PCIE_DEMAND,
        severity=Severity.ERROR if share >= THRESHOLDS["error_share"][0] else Severity.WARN,
        title=f"Input copies need {share:.0%} of each step at the measured PCIe ceiling ({ceiling_gbs:,.1f} GB/s)",
        evidence=evidence,
        fix=(
            "# send fewer bytes per sample over PCIe:\n"
            "from gpudoctor.train import uint8_collate, normalize_on_device\n"
            "loader = fast_loader(ds, batch_size=B, collate_fn=uint8_collate)   # uint8: 1/4 of float32\n"
            "x = normalize_on_device(x.to('cuda', non_blocking=True))            # convert on the GPU\n"
            "# a dataset that fits in GPU memory: gpudoctor.train.GpuLoader (no per-step copy at all)"
        ),
        expected_gain=None,
    )]
