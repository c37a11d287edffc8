"""Live bytes per allocation site at two steps, to name what a leak holds.

Memory mode (``gpudoctor memory run``): allocation history is on for the whole run
(:mod:`memory_probe`). After the probed steps, at the optimizer's step pre-hook (the same point
of every step), the probe reduces ``torch.cuda.memory._snapshot()`` to live bytes per user site:
once at the first step after the probed ones (the base), then every :data:`EVERY` steps and at
the last step of ``--steps``, each time rewriting ``leak-sites-rank{N}.json`` with the sites that
grew since the base (:mod:`gpudoctor.analysis.memory_leak_sites`).

Plain ``gpudoctor run`` and ``gpudoctor.watch`` (CUDA only): no history is recorded, but
:func:`watch` sees the allocated bytes the step boundary already read (armed by ``run``'s
:func:`~gpudoctor.collectors.instrument.probes.install`, and by the watch's
:class:`~gpudoctor.collectors.inprocess.InProcessProbes` with its ``steps`` as the limit). When
they grew by at least the leak rule's ``leak_min_bytes_per_step`` on each of the last
:attr:`LeakWatch.grow_steps` steps past warm-up, it turns history on for a few steps (never
inside the profiler window, never past ``--steps``, once per process or watch), takes the base
snapshot one step later (so the step's own allocations carry stacks in both snapshots), the
second :attr:`LeakWatch.record_steps` steps after it, stops the history and writes the same
``leak-sites-rank{N}.json``: the leak finding of ``run``, ``watch``, ``diagnose`` and ``report``
then names the sites. An ``atexit`` handler stops the history if the script dies in between;
the watch's end (its block ended or raised first) does the same through :func:`disarm`.

History turned on at boundary ``b`` (the end of step ``b``) and off at the boundary of the second
snapshot ``b + 1 + record_steps``: steps ``b + 1`` to ``b + 1 + record_steps`` ran with it (5
steps by default; the snapshots themselves are taken at boundaries, outside any step's time).
The record says so in ``LeakSites.history_steps``, and the step statistics leave those steps out
(:func:`gpudoctor.analysis.facts.rank_stats`). When the recording ends early (the script ended,
a snapshot failed), the record is still written, with no sites and the steps that did run with
history on.

Taking a snapshot walks the allocator's state on the host (tens of ms, at a boundary, outside
any step's time); while history is on, every allocation records its Python stack (host time in
the recorded steps). A memory diagnosis cost, paid a few times per run, never an OOM needed.
"""

from __future__ import annotations

import atexit
import sys
from dataclasses import dataclass, field
from typing import Any

from gpudoctor.analysis.memory_leak_sites import grown_sites, site_totals
from gpudoctor.collectors.instrument.state import S, is_owner
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


def _write(base: dict[str, tuple[int, int]], base_step: int, totals: dict[str, tuple[int, int]],
           step: int, history: tuple[int, int] | None = None) -> None:
    assert S.run_dir is not None
    sites = LeakSites(step_from=base_step, step_to=step, sites=grown_sites(base, totals),
                      history_steps=history)
    write_json(S.run_dir / leak_sites_file(S.rank), sites, kind=KIND_LEAK_SITES)


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
        _write(L.base, L.base_step, totals, S.step)
    except Exception as exc:  # noqa: BLE001 - a diagnosis aid must never stop training
        print(f"gpudoctor: allocation sites not recorded ({type(exc).__name__}: {exc})", file=sys.stderr)
    finally:
        S.quiet = was_quiet


# ---- plain `gpudoctor run`: history for a few steps once a leak shows --------------------------


def _c(default: int, reason: str) -> Any:
    return field(default=default, metadata={"reason": reason})


@dataclass(frozen=True, slots=True)
class LeakWatch:
    """When ``run`` turns allocation history on, and for how long (the step thresholds are the
    leak rule's: ``Thresholds.warmup_steps`` and ``leak_min_bytes_per_step``)."""

    grow_steps: int = _c(3, "Consecutive steps past warm-up whose allocated bytes after the boundary set a new high by at least leak_min_bytes_per_step (a high, not the previous step: variable-length batches move the bytes up and down). A steady loop holds the same bytes at every boundary, so three such growths in a row are already a pattern; more would push the recording into the profiler window of a 20-step run (window 15-19: warm-up 5, 3 growths, history on at boundary 8, base 9, last snapshot 13).")
    record_steps: int = _c(4, "Steps between the two snapshots: the leak's site grows by 4x its per-step leak, while only 5 steps (one before the base, 4 after) run with allocation stacks recorded, a small part of a 60-step run. A judgement.")


class _Watch:
    """State of the online check, per process under ``run``, per observation under
    ``gpudoctor.watch`` (memory mode has its own history)."""

    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        self.armed = False  # watch the boundaries; off for good once done
        self.high = -1  # the most allocated bytes after any boundary so far
        self.streak = 0  # consecutive qualifying growths
        self.started = -1  # the boundary at which history was turned on
        self.ours = False  # we turned history on (the script had not): we turn it off
        self.written = False  # the sites (with the history's steps) were written
        self.base: dict[str, tuple[int, int]] | None = None
        self.base_step = -1
        self.warmup = 5
        self.min_growth = 0.0
        self.config = LeakWatch()
        self.window: tuple[int, int] | None = None
        self.limit: int | None = None


W = _Watch()


def arm(window: tuple[int, int] | None, limit: int | None, config: LeakWatch | None = None) -> None:
    """Turn the online check on, afresh (``probes.install`` in run mode; each ``gpudoctor.watch``:
    a notebook may watch several times in one process, each watch may record once).

    ``window``: the profiler window's (first, last) step; ``limit``: the steps observed
    (``--steps``, the watch's ``steps``), ``None`` to the end.
    """
    from gpudoctor.analysis.thresholds import Thresholds

    W.reset()
    th = Thresholds()
    W.warmup, W.min_growth = th.warmup_steps, th.leak_min_bytes_per_step
    W.config, W.window, W.limit, W.armed = config or LeakWatch(), window, limit, True


def watch(step: int, mem: dict[str, Any] | None) -> None:
    """At the boundary of ``step``, after the profiler window's own start or stop.

    ``mem``: the step record's allocator counters (``None`` on the CPU: nothing happens). The
    check itself is an attribute read and a few integer compares per step.
    """
    if not W.armed or mem is None:
        return
    if W.started < 0:
        allocated = mem["allocated_bytes"]
        # a new high by the leak rule's step: a leak sets one at every boundary, while a loop
        # whose kept tensors change size with the batch (variable lengths) moves up and down
        # and does not climb past its own highs three boundaries in a row
        grew = step > W.warmup and W.high >= 0 and allocated - W.high >= W.min_growth
        W.high = max(W.high, allocated)
        W.streak = W.streak + 1 if grew else 0
        if W.streak >= W.config.grow_steps and _clear(step):
            _start(step)
        return
    _recording(step)


def _clear(step: int) -> bool:
    """History on from boundary ``step`` to ``step + 1 + record_steps`` touches neither the
    profiler window (started at boundary ``first - 1``, stopped at ``last``) nor ``--steps``."""
    end = step + 1 + W.config.record_steps
    if W.limit is not None and end > W.limit - 1:
        return False
    return W.window is None or step >= W.window[1] or end < W.window[0] - 1


def _cuda() -> Any:
    import torch

    return torch if torch.cuda.is_initialized() else None


def _history_on() -> bool:
    from gpudoctor.core.memory_history import history_enabled

    return history_enabled()


def _set_history(on: bool) -> None:
    from gpudoctor.core.memory_history import start_history, stop_history

    start_history() if on else stop_history()


def _start(step: int) -> None:
    W.started = step
    if _cuda() is None:
        W.armed = False
        return
    try:
        if not _history_on():  # a script recording its own history keeps it, on
            _set_history(True)
            W.ours = True
            atexit.register(stop_at_end)
    except Exception as exc:  # noqa: BLE001 - a diagnosis aid must never stop training
        _give_up(exc)


def _recording(step: int) -> None:
    if step == W.started + 1 or step == W.started + 1 + W.config.record_steps:
        torch = _cuda()
        try:
            totals = live_sites(torch)
            if W.base is None:
                W.base, W.base_step = totals, step
                return
            # steps started + 1 .. step ran with the history on: the stats leave them out
            _write(W.base, W.base_step, totals, step, (W.started + 1, step) if W.ours else None)
        except Exception as exc:  # noqa: BLE001
            _give_up(exc, step)
            return
        W.written = True
        stop_run_history()


def _give_up(exc: Exception, last: int | None = None) -> None:
    """Stop recording after an error; ``last``: the last step that ran with the history on."""
    print(f"gpudoctor: allocation sites not recorded ({type(exc).__name__}: {exc})", file=sys.stderr)
    stop_run_history(last)


def stop_at_end() -> None:
    """The script ends (``atexit``) or the watch does: stop a recording still in progress."""
    stop_run_history(S.step - 1)  # S.step: the step in progress, which writes no record


def disarm() -> None:
    """The end of a ``gpudoctor.watch`` (the loop goes on): the check stops, a recording still in
    progress (the block ended or raised first) stops as at exit, and the exit handler goes."""
    stop_at_end()
    atexit.unregister(stop_at_end)


def stop_run_history(last: int | None = None) -> None:
    """Stop what :func:`watch` started (once; also at exit, if the script died while recording).

    ``last``: the last step that ran with the history on, when it stops before the second
    snapshot: the steps from the one after :attr:`_Watch.started` to it are written as
    ``history_steps`` of a record with no sites, so the step statistics still leave them out.
    """
    W.armed = False
    if W.ours:
        W.ours = False
        if last is not None and not W.written:
            _write_unfinished(last)
        try:
            _set_history(False)
        except Exception:  # noqa: BLE001 - the process is ending or CUDA is gone
            pass


def _write_unfinished(last: int) -> None:
    first = W.started + 1
    if last < first or S.run_dir is None or not is_owner():
        return
    sites = LeakSites(step_from=W.base_step if W.base is not None else -1, step_to=-1,
                      history_steps=(first, last))
    try:
        write_json(S.run_dir / leak_sites_file(S.rank), sites, kind=KIND_LEAK_SITES)
    except Exception:  # noqa: BLE001 - the process may be ending: the steps stay counted
        pass
