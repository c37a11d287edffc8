"""Why an allocation failed: top allocation sites at the moment of OOM, and the ranked fixes."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

from gpudoctor.records.finding import Finding, Severity
from gpudoctor.records.memory import OomSnapshot
from gpudoctor.records.units import human_bytes

UNKNOWN_SITE = "(no Python frame recorded: allocation history was off)"


@dataclass(frozen=True)
class AllocationSite:
    """Live bytes grouped by the innermost Python frame that allocated them."""

    site: str
    bytes: int
    blocks: int
    share: float  # of all live bytes


def top_sites(snapshot: OomSnapshot, *, limit: int = 10) -> list[AllocationSite]:
    """Allocation sites by live bytes, largest first."""
    sizes: dict[str, int] = defaultdict(int)
    counts: dict[str, int] = defaultdict(int)
    for block in snapshot.blocks:
        site = block.frames[0] if block.frames else UNKNOWN_SITE
        sizes[site] += block.size_bytes
        counts[site] += 1
    total = sum(sizes.values()) or 1
    ranked = sorted(sizes, key=lambda s: -sizes[s])[:limit]
    return [AllocationSite(site=s, bytes=sizes[s], blocks=counts[s], share=sizes[s] / total)
            for s in ranked]


def explain_oom(snapshot: OomSnapshot) -> list[Finding]:
    """Findings for an OOM: the verdict (fragmentation or real shortage) and the fixes, ranked."""
    cached_free = max(snapshot.reserved_bytes - snapshot.allocated_bytes, 0)
    evidence = [
        f"tried to allocate {human_bytes(snapshot.requested_bytes)} on GPU {snapshot.device}",
        f"allocated by tensors {human_bytes(snapshot.allocated_bytes)}, reserved by PyTorch "
        f"{human_bytes(snapshot.reserved_bytes)}, free on the device "
        f"{human_bytes(snapshot.device_free_bytes)} of {human_bytes(snapshot.device_total_bytes)}",
    ]
    sites = top_sites(snapshot, limit=5)
    evidence += [f"{human_bytes(s.bytes)} ({s.share:.0%}) live from {s.site}" for s in sites]
    findings: list[Finding] = []
    if cached_free >= snapshot.requested_bytes:
        findings.append(Finding(
            code="GD-OOM-FRAGMENTATION",
            severity=Severity.ERROR,
            title=(f"Out of memory from fragmentation: PyTorch holds {human_bytes(cached_free)} "
                   f"free in its cache but no piece of {human_bytes(snapshot.requested_bytes)}"),
            evidence=tuple(evidence + [
                f"reserved − allocated = {human_bytes(cached_free)} ≥ the request; "
                f"inactive split blocks {human_bytes(snapshot.inactive_split_bytes)}, "
                f"allocation retries {snapshot.alloc_retries}",
            ]),
            fix="export PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True   # before starting Python",
        ))
    else:
        findings.append(Finding(
            code="GD-OOM-SHORTAGE",
            severity=Severity.ERROR,
            title=(f"Out of memory: live tensors need more than the GPU has "
                   f"({human_bytes(snapshot.allocated_bytes)} live, "
                   f"{human_bytes(snapshot.requested_bytes)} more requested)"),
            evidence=tuple(evidence),
            fix=_SHORTAGE_FIXES,
        ))
    return findings


_SHORTAGE_FIXES = """\
# in order of what usually costs least:
# 1. a smaller micro-batch with gradient accumulation (same effective batch)
loss = loss_fn(model(x_micro), y_micro) / accum_steps; loss.backward()
# 2. bf16 autocast halves activation memory
with torch.autocast("cuda", dtype=torch.bfloat16): out = model(x)
# 3. activation checkpointing on the largest blocks
out = torch.utils.checkpoint.checkpoint(block, x, use_reentrant=False)
# 4. free what you keep: store losses with loss.item() / outputs with .detach().cpu()
# 5. optimizer.zero_grad(set_to_none=True) frees gradients between steps"""
