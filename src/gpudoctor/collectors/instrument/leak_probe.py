"""Memory mode: live bytes per allocation site at two steps, to name what a leak holds.

Allocation history is on for the whole of a memory run (:mod:`memory_probe`). After the probed
steps, at the optimizer's step pre-hook (the same point of every step), the probe reduces
``torch.cuda.memory._snapshot()`` to live bytes per user site: once at the first step after the
probed ones (the base), then every :data:`EVERY` steps and at the last step of ``--steps``,
each time rewriting ``leak-sites-rank{N}.json`` with the sites that grew since the base
(:mod:`gpudoctor.analysis.memory_leak_sites`). Taking a snapshot walks the allocator's state on
the host (tens of ms): a memory diagnosis cost, paid a few times per run, never an OOM needed.
"""

from __future__ import annotations

import sys
from typing import Any

from gpudoctor.analysis.memory_leak_sites import grown_sites, site_totals
from gpudoctor.collectors.instrument.state import S
from gpudoctor.records.base import write_json
from gpudoctor.records.memory import LeakSites
from gpudoctor.records.rundir import KIND_LEAK_SITES, leak_sites_file

EVERY = 5


class _Leak:
    def __init__(self) -> None:
        self.base: dict[str, tuple[int, int]] | None = None
        self.base_step = -1


L = _Leak()


def live_sites(torch: Any) -> dict[str, tuple[int, int]]:
    from gpudoctor.core.memory_history import reduce_snapshot

    snap = reduce_snapshot(torch.cuda.memory._snapshot(), device=torch.cuda.current_device(),
                           requested_bytes=0, device_free_bytes=0, device_total_bytes=0)
    return site_totals(snap.blocks)


def due(step: int, first: int, limit: int | None) -> bool:
    """Whether ``step`` takes a snapshot: the base, every EVERY steps after it, the last one."""
    if step < first:
        return False
    return step == first or (step - first) % EVERY == 0 or (limit is not None and step == limit - 1)


def on_step(torch: Any, first: int) -> None:
    """At the optimizer's step pre-hook of step ``S.step`` (``first``: the first unprobed step)."""
    if not due(S.step, first, S.steps_limit) or S.run_dir is None:
        return
    was_quiet, S.quiet = S.quiet, True
    try:
        totals = live_sites(torch)
        if L.base is None:
            L.base, L.base_step = totals, S.step
            return
        sites = LeakSites(step_from=L.base_step, step_to=S.step, sites=grown_sites(L.base, totals))
        write_json(S.run_dir / leak_sites_file(S.rank), sites, kind=KIND_LEAK_SITES)
    except Exception as exc:  # noqa: BLE001 - a diagnosis aid must never stop training
        print(f"gpudoctor: allocation sites not recorded ({type(exc).__name__}: {exc})", file=sys.stderr)
    finally:
        S.quiet = was_quiet
