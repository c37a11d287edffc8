"""The derived facts every rule reads, computed once per run: per-rank step statistics, the
profiler window per step, the step-time breakdown and whether the run used a GPU at all."""

from __future__ import annotations

from dataclasses import dataclass

from gpudoctor.analysis.breakdown import (
    Breakdown,
    compute_breakdown,
    exposed_nccl_ms,
    host_active_ms,
    window_steps,
)
from gpudoctor.analysis.compile_time import CompileTime, compile_time
from gpudoctor.analysis.steps import RankStepStats, median, rank_step_stats
from gpudoctor.analysis.thresholds import Thresholds
from gpudoctor.analysis.utilization import GpuUtilSummary, BytesTrend, host_memory_trend, summarize_gpus
from gpudoctor.records.run import LoaderConfig, RankConfig, WindowSummary
from gpudoctor.records.rundir import RunData


def main_loader(config: RankConfig | None) -> LoaderConfig | None:
    """The loader the training loop iterated: the one it took most batches from (an evaluation
    loader is iterated every epoch too, but for fewer batches), then the one it started most
    often (recordings without batch counts); the first one on a tie."""
    if config is None or not config.loaders:
        return None
    return max(config.loaders, key=lambda lo: (lo.batches, lo.epochs_started))


# CPU-side profiler events that are the host waiting for the GPU or the profiler itself
NOT_HOST_WORK = frozenset({"Command Buffer Full", "Activity Buffer Request", "cudaDeviceSynchronize",
                           "cudaStreamSynchronize"})


@dataclass(frozen=True, slots=True)
class RankFacts:
    """One rank: its statistics, its configuration, its profiler window and the breakdown."""

    rank: int
    stats: RankStepStats
    config: RankConfig | None
    window: WindowSummary | None
    breakdown: Breakdown
    nvml_util_frac: float | None = None
    # median time of the steps inside the profiler window (the step statistics leave them out:
    # the profiler slows them); ``None`` without a window or without steps recorded in it
    window_step_ms: float | None = None
    compile: CompileTime | None = None  # what it compiled over the whole run, warm-up included

    @property
    def window_steps(self) -> int:
        return window_steps(self.window)

    @property
    def busy_frac(self) -> float | None:
        """Share of the mean step the GPU was busy: the window's GPU busy time per step (the
        union of kernel and copy intervals on the GPU timeline) over the mean *un-profiled*
        step, else NVML's mean utilisation of the rank's GPU (coarser: any kernel running counts).

        Not the host's wall time of the window: a GPU-bound host runs ahead and blocks in a full
        launch queue, so the window's host span need not contain its steps' GPU work (issue 15
        reports an H200 run with 249 ms of host time for 5 steps whose GPU work took 1,175 ms,
        which the old host-based share turned into "GPU busy 23.5%"), and the profiler
        slows the host, not the GPU. Not ``gpu_ms`` either: CUDA events at step boundaries
        measure the span between them, idle gaps included. Capped at 1.0 only where the window's
        GPU time per step exceeds the mean step (the GPU is then busy all of it).
        """
        b = self.breakdown
        if b.gpu_timeline and b.gpu_busy_ms is not None and b.step_ms > 0:
            return b.gpu_busy_ms / b.step_ms
        return self.nvml_util_frac

    @property
    def host_bound(self) -> bool:
        """The host's own work per step (:func:`host_active_ms`) takes at least the GPU's busy
        time: the host is the bottleneck even if it could run ahead of the GPU."""
        host = host_active_ms(self.stats, self.window)
        busy = self.breakdown.gpu_busy_ms
        return host is not None and busy is not None and host >= busy

    @property
    def sync_cost_share(self) -> float | None:
        """What synchronising calls cost per step: the host's time blocked in them (``W``),
        capped by the GPU's idle time. Without them the host queues the next step's work while
        the GPU runs and the step takes ``max(step - W, GPU busy)`` instead of ``step``: the
        saving is ``min(W, step - GPU busy)``. ``W`` is measured per step by the probes; on
        recordings from before they did, the profiler window's blocked time stands in for it,
        an under-estimate (see :func:`host_active_ms`). ``None`` without a GPU timeline."""
        busy = self.breakdown.gpu_busy_ms
        step = self.breakdown.step_ms
        if busy is None or step <= 0:
            return None
        if self.stats.mean_sync_ms is not None:
            blocked = self.stats.mean_sync_ms
        elif self.window is not None and self.window_steps:
            blocked = self.window.sync_ms / self.window_steps
        else:
            return None
        return max(0.0, min(blocked, step - busy)) / step

    def host_ops_line(self, n: int = 3) -> str | None:
        """Where the host's time went in the window: its top CPU ops by self time, per step
        (what to make cheaper when the host is the bottleneck); ``None`` without a window."""
        if self.window is None or not self.window.top_ops:
            return None
        ops = [o for o in self.window.top_ops if o.name not in NOT_HOST_WORK][:n]
        if not ops:
            return None
        parts = [f"{o.name} {self.per_step(o.total_us / 1000.0):.2f} ms" for o in ops]
        return "host time per step went mostly to (profiler window, CPU self time): " + ", ".join(parts)

    def per_step(self, window_ms: float) -> float:
        """A window total as milliseconds per step."""
        return window_ms / self.window_steps if self.window_steps else 0.0

    @property
    def exposed_comm_ms(self) -> float:
        """NCCL time per step that no compute kernel overlapped."""
        return self.per_step(exposed_nccl_ms(self.window))

    @property
    def comm_wait_ms(self) -> float:
        """Time per step inside collectives: exposed NCCL time plus gloo collective time.

        gloo's collectives (CPU ops on its worker threads, overlapping no device kernel) hold
        the wait for slower ranks on a gloo run, where there are no NCCL kernels.
        """
        gloo = self.per_step(self.window.gloo_ms) if self.window is not None else 0.0
        return self.exposed_comm_ms + gloo


@dataclass(frozen=True, slots=True)
class RunFacts:
    """Facts about the whole run, with the per-rank ones in rank order."""

    ranks: tuple[RankFacts, ...]
    gpus: tuple[GpuUtilSummary, ...]
    world_size: int
    on_gpu: bool
    configs: dict[int, RankConfig]
    ran_out_of_memory: bool = False  # an OOM snapshot was written, or the allocator counted one
    host_memory: BytesTrend | None = None  # the process tree's RSS over the run (host samples)


def _nvml_util(gpus: list[GpuUtilSummary], config: RankConfig | None) -> float | None:
    """Mean NVML utilisation (0-1) of the GPU the rank used, when known."""
    if config is None or config.cuda_device_index is None:
        return None
    for gpu in gpus:
        if gpu.index == config.cuda_device_index and gpu.util_mean_pct is not None:
            return gpu.util_mean_pct / 100.0
    return None


def _uses_gpu(run: RunData) -> bool:
    if any(c.device.startswith("cuda") for c in run.configs.values()):
        return True
    return any(s.gpu_ms is not None for steps in run.steps.values() for s in steps)


def profiled_steps(run: RunData, rank: int) -> tuple[int, int] | None:
    """The steps the profiler window covered on ``rank`` (first, last), to keep out of the step
    statistics (the profiler slows them); the window asked for when the rank wrote none."""
    window = run.windows.get(rank)
    if window is not None:
        return (window.first_step, window.last_step)
    if len(run.manifest.profile_window) == 2:
        return (run.manifest.profile_window[0], run.manifest.profile_window[1])
    return None


def history_steps(run: RunData, rank: int) -> tuple[int, int] | None:
    """The steps ``run`` recorded allocation history in on ``rank`` (first, last) to name a
    leak's sites (``LeakSites.history_steps``), to keep out of the step statistics (every
    allocation recorded a stack); ``None`` when it did not (memory mode, older recordings)."""
    sites = run.leak_sites.get(rank)
    return None if sites is None else sites.history_steps


def rank_stats(run: RunData, rank: int, thresholds: Thresholds) -> RankStepStats | None:
    """The step statistics of one rank: the only place they are computed for a run."""
    return rank_step_stats(run.steps.get(rank, []), thresholds, profiled_steps(run, rank),
                           history_steps(run, rank))


def window_step_ms(run: RunData, rank: int) -> float | None:
    """The median time of ``rank``'s steps inside its profiler window."""
    window = run.windows.get(rank)
    if window is None:
        return None
    inside = [s.step_ms for s in run.steps.get(rank, []) if window.first_step <= s.step <= window.last_step]
    return median(inside) if inside else None


def run_facts(run: RunData, thresholds: Thresholds) -> RunFacts:
    """Compute the facts of ``run`` (pure; reads only the loaded records)."""
    gpus = summarize_gpus(run.gpu)
    ranks = []
    for rank in run.ranks:
        window = run.windows.get(rank)
        stats = rank_stats(run, rank, thresholds)
        if stats is None:
            continue
        config = run.configs.get(rank)
        ranks.append(RankFacts(rank=rank, stats=stats, config=config, window=window,
                               breakdown=compute_breakdown(stats, window),
                               nvml_util_frac=_nvml_util(gpus, config),
                               window_step_ms=window_step_ms(run, rank),
                               compile=compile_time(rank, run.steps.get(rank, []))))
    world = run.manifest.world_size or max(
        [c.world_size for c in run.configs.values()] + [len(run.ranks), 1])
    oom = run.oom is not None or any(r.stats.ooms for r in ranks)
    spans = [r.stats.trend for r in ranks if r.stats.trend is not None]
    host = host_memory_trend(run.host, min(t.first_t_s for t in spans),
                             max(t.last_t_s for t in spans)) if spans else None
    return RunFacts(ranks=tuple(ranks), gpus=tuple(gpus), world_size=world,
                    on_gpu=_uses_gpu(run), configs=dict(run.configs), ran_out_of_memory=oom,
                    host_memory=host)


__all__ = ["Breakdown", "RankFacts", "RunFacts", "history_steps", "main_loader", "profiled_steps", "rank_stats",
           "run_facts", "window_step_ms"]
