"""Where a rank's median step goes: decided on the GPU timeline first, then on the host's.

DESIGN.md's attribution model. A step has two timelines running at once, the host's and the
GPU's, and the step takes as long as the busier one. The profiler window gives the GPU's side as
intervals (kernels, copies, NCCL kernels); the probes give the host's (waiting for the loader,
issuing copies). So:

1. The GPU's busy time per step (the union of its kernel and copy intervals in the window,
   divided by the window's steps) is split by what the GPU ran: ``compute`` (kernels),
   ``copy`` (copies no kernel overlapped), ``comm`` (NCCL time no compute kernel overlapped:
   the all-reduce itself, or a fast rank waiting inside it for a slow one).
2. The rest of the step the GPU was idle. That idle time is the host's doing, split by what the
   host did meanwhile: waiting for the next batch (``data``), issuing copies (``copy``), waiting
   in gloo collectives (``comm``), and the remainder, ``host``: Python, kernel launches and the
   gaps after synchronising calls.

Host time blocked in a full launch queue, in the caching allocator or in a synchronising call
while the GPU is still running queued work is the GPU's time, counted under what the GPU ran -
never as "sync": removing that sync would not shorten the step. A loader wait that the GPU's
queued work hides costs nothing and is not counted either.

Without a GPU timeline (a CPU run, or ``--no-profile``) only the host's side is known: data wait,
copy issue time, gloo waits, and the rest is ``compute`` (on the CPU, or unsplit on the GPU).

Everything is per *mean* step of the steady, un-profiled steps: the GPU's busy time per step is
a mean over the window's steps, and a mean step is what the run delivers (a GPU-bound host's
step times are bimodal - it alternates between a full and a draining launch queue - so their
median says little; the H200 ``clean`` recording has 3.5 ms and 18.7 ms steps). Periodic stalls
that a mean contains are named by :mod:`gpudoctor.analysis.tail_rules`. The profiler slows the
host (each op is recorded) but not the GPU's kernels, so the window's GPU time per step is set
against the un-profiled steps.
"""

from __future__ import annotations

from dataclasses import dataclass

from gpudoctor.analysis.steps import RankStepStats
from gpudoctor.records.run import WindowSummary

PARTS = ("data", "copy", "compute", "comm", "host")


@dataclass(frozen=True, slots=True)
class Breakdown:
    """The mean step in milliseconds; ``data + copy + compute + comm + host == step_ms``.

    Attributes:
        gpu_timeline: the split came from the GPU timeline (else from host times only).
        gpu_busy_ms: the GPU's busy time per step (``None`` without a GPU timeline).
        stall_host_ms: of ``host_ms``, the host time of periodic stalls (a checkpoint or an
            epoch boundary every N steps, :class:`gpudoctor.analysis.steps.Tail`) spread over the
            mean step: the stall rule owns it, so the rules about every step's host work
            (launch overhead, syncs) leave it out.
    """

    step_ms: float
    data_ms: float
    copy_ms: float
    compute_ms: float
    comm_ms: float
    host_ms: float
    gpu_timeline: bool
    gpu_busy_ms: float | None = None
    stall_host_ms: float = 0.0

    def part(self, name: str) -> float:
        return getattr(self, f"{name}_ms")

    def share(self, name: str) -> float:
        return self.part(name) / self.step_ms if self.step_ms > 0 else 0.0

    @property
    def largest(self) -> str:
        return max(PARTS, key=self.part)


def window_steps(window: WindowSummary | None) -> int:
    """Optimizer steps the window covered (0 without a window)."""
    if window is None:
        return 0
    return max(1, window.last_step - window.first_step + 1)


def _copy_on_gpu(window: WindowSummary) -> float:
    if window.memcpy_ms is not None:
        return window.memcpy_ms
    # older recordings: the copies' total time (copies and kernels rarely overlap in them)
    return sum(m.total_us for m in window.memcpy) / 1000.0


def exposed_nccl_ms(window: WindowSummary | None) -> float:
    """NCCL time of the window that no compute kernel overlapped (a window total, in ms)."""
    if window is None or not window.nccl_ms:
        return 0.0
    return window.nccl_ms * (1.0 - (window.nccl_overlap_frac or 0.0))


def compute_breakdown(stats: RankStepStats, window: WindowSummary | None) -> Breakdown:
    """Split the mean step of ``stats`` as the module docstring says."""
    step = stats.mean_step_ms
    n = window_steps(window)
    gloo = window.gloo_ms / n if window is not None and n else 0.0
    if window is not None and n and window.gpu_busy_ms is not None:
        busy = min(step, window.gpu_busy_ms / n)
        comm = min(busy, exposed_nccl_ms(window) / n)
        copy_gpu = min(busy - comm, _copy_on_gpu(window) / n)
        compute = busy - comm - copy_gpu
        idle = step - busy
        data = min(stats.mean_data_wait_ms, idle)
        h2d = min(stats.mean_h2d_ms or 0.0, idle - data)
        gloo_idle = min(gloo, idle - data - h2d)
        host = idle - data - h2d - gloo_idle
        return Breakdown(step_ms=step, data_ms=data, copy_ms=copy_gpu + h2d, compute_ms=compute,
                         comm_ms=comm + gloo_idle, host_ms=host, gpu_timeline=True,
                         gpu_busy_ms=busy, stall_host_ms=min(host, _stall_host_ms(stats)))
    data = min(step, stats.mean_data_wait_ms)
    h2d = min(step - data, stats.mean_h2d_ms or 0.0)
    comm = min(step - data - h2d, gloo)
    return Breakdown(step_ms=step, data_ms=data, copy_ms=h2d, compute_ms=step - data - h2d - comm,
                     comm_ms=comm, host_ms=0.0, gpu_timeline=False)


def _stall_host_ms(stats: RankStepStats) -> float:
    """Host time per mean step that the periodic stalls add beyond their data wait."""
    tail = stats.tail
    if tail is None or not tail.stalls or not stats.n_used:
        return 0.0
    data = max(0.0, tail.extra_data_wait_ms) * len(tail.slow_steps)
    return max(0.0, tail.excess_ms - data) / stats.n_used


def host_active_ms(stats: RankStepStats, window: WindowSummary | None) -> float | None:
    """The host's own work per mean step: the step minus the loader wait and minus the time
    blocked in synchronising calls.

    The probes time every counted sync in every step (``StepRecord.sync_ms``). Recordings from
    before they did fall back on the profiler window's blocked time per step, an under-estimate:
    the profiler slows the host's work, not the GPU's, so inside the window the host waits less
    in a sync, and the host's own work comes out too large (on an H200 the ``item_every_step``
    workload blocked 2.3 ms a step in the window; costed on that, its syncs were worth >= 5% of
    the step, and removing them by hand measured +30% and +46% throughput:
    benchmarks/results/gpu_truth/sync_ab.json). ``None`` when neither is known.
    """
    if stats.mean_sync_ms is not None:
        blocked = stats.mean_sync_ms
    else:
        n = window_steps(window)
        if window is None or not n:
            return None
        blocked = window.sync_ms / n
    return max(0.0, stats.mean_step_ms - blocked - stats.mean_data_wait_ms)


__all__ = ["PARTS", "Breakdown", "compute_breakdown", "exposed_nccl_ms", "host_active_ms",
           "window_steps"]
