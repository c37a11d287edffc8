"""Which lines of the user's code hold the bytes a leak adds (pure).

Memory mode records allocation history for the whole run. After the probed steps the probe
reduces two snapshots, taken at the same point of two steps (the optimizer's step pre-hook), to
live bytes per allocation site: the first frame of the user's own code (torch internals and
gpudoctor skipped). A site whose live bytes grew between them holds what the leak adds; when
the leak rule fires, the largest growths are named in its finding.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable

from gpudoctor.records.finding import Finding
from gpudoctor.records.memory import LeakSites, LiveBlock, SiteGrowth
from gpudoctor.records.units import human_bytes

UNKNOWN = "(no Python frame recorded)"
MAX_SITES = 5
_SKIP = ("/torch/", "\\torch\\", "/gpudoctor/", "\\gpudoctor\\", "<frozen ", "??")


# The leak finding's fix: what usually keeps tensors alive, then how to find the holder. Once
# allocation history has named the sites, the fix points at the top one and drops the second part.
LEAK_HOLDERS = (
    "# something keeps tensors (and their autograd graph) alive across steps:\n"
    "total_loss += loss.item()            # or loss.detach(), not the graph-carrying loss\n"
    "history.append(logits.detach())      # .detach().cpu() if kept for long"
)
LEAK_FIND = (
    "# find the holder: gpudoctor memory run -- <your command>   (names the lines whose live\n"
    "# bytes grow), or torch.cuda.memory._record_memory_history(), then\n"
    "# torch.cuda.memory._dump_snapshot(\"leak.pickle\") and open it in pytorch.org/memory_viz"
)


def user_site(frames: Iterable[str]) -> str:
    """The first frame outside torch and gpudoctor (``"train.py:42 train"``), else the first."""
    frames = tuple(frames)
    for frame in frames:
        if not any(mark in frame for mark in _SKIP):
            return frame
    return frames[0] if frames else UNKNOWN


def site_totals(blocks: Iterable[LiveBlock]) -> dict[str, tuple[int, int]]:
    """Live ``(bytes, blocks)`` per user site."""
    totals: dict[str, tuple[int, int]] = {}
    for block in blocks:
        site = user_site(block.frames)
        size, count = totals.get(site, (0, 0))
        totals[site] = (size + block.size_bytes, count + 1)
    return totals


def grown_sites(before: dict[str, tuple[int, int]], after: dict[str, tuple[int, int]],
                *, limit: int = MAX_SITES) -> tuple[SiteGrowth, ...]:
    """Sites whose live bytes grew, the largest growth first."""
    grown = [SiteGrowth(site=site, bytes_from=before.get(site, (0, 0))[0], bytes_to=size,
                        blocks_from=before.get(site, (0, 0))[1], blocks_to=count)
             for site, (size, count) in after.items() if size > before.get(site, (0, 0))[0]]
    grown.sort(key=lambda g: (-(g.bytes_to - g.bytes_from), g.site))
    return tuple(grown[:limit])


def evidence_lines(sites: LeakSites) -> list[str]:
    """One line per grown site: what it holds more, from step to step."""
    steps = sites.step_to - sites.step_from
    lines = []
    for g in sites.sites:
        grew = g.bytes_to - g.bytes_from
        per = f", {human_bytes(grew / steps)} per step" if steps > 0 else ""
        lines.append(f"{g.site}: live {human_bytes(g.bytes_from)} at step {sites.step_from} -> "
                     f"{human_bytes(g.bytes_to)} at step {sites.step_to} (+{human_bytes(grew)}{per}; "
                     f"{g.blocks_from} -> {g.blocks_to} blocks)")
    return lines


def name_leak_sites(findings: list[Finding], sites: LeakSites | None, code: str) -> list[Finding]:
    """The leak finding (``code``) with the sites that grew added to its evidence and title."""
    if sites is None or not sites.sites:
        return findings
    out = []
    for f in findings:
        if f.code == code:
            top = sites.sites[0].site
            f = dataclasses.replace(
                f, title=f"{f.title}; the most grows at {top}",
                evidence=(*f.evidence, "allocation sites that grew (allocation history, no OOM needed):",
                          *evidence_lines(sites)),
                fix="\n".join((f"# the tensors kept each step are allocated at {top}: look at what holds them",
                                LEAK_HOLDERS)))
        out.append(f)
    return out
