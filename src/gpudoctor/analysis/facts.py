"""The derived facts every rule reads, computed once per run: per-rank step statistics, the
profiler window per step, the step-time breakdown and whether the run used a GPU at all."""

from __future__ import annotations

from dataclasses import dataclass

from gpudoctor.analysis.steps import RankStepStats, rank_step_stats
from gpudoctor.analysis.thresholds import Thresholds
from gpudoctor.analysis.utilization import GpuUtilSummary, summarize_gpus
from gpudoctor.records.run import LoaderConfig, RankConfig, WindowSummary
from gpudoctor.records.rundir import RunData


def main_loader(config: RankConfig | None) -> LoaderConfig | None:
    """The loader the training loop iterated most (the first one on a tie)."""
    if config is None or not config.loaders:
        return None
    return max(config.loaders, key=lambda lo: lo.epochs_started)


@dataclass(frozen=True, slots=True)
class Breakdown:
    """Where the host wall time of a median step goes (milliseconds; the parts add up to ``step_ms``).

    ``compute_ms`` is the rest: the host launching work while the GPU computes. ``sync_ms`` and
    ``comm_ms`` come from the profiler window (0 when there was none).
    """

    step_ms: float
    data_wait_ms: float
    h2d_ms: float
    sync_ms: float
    comm_ms: float
    compute_ms: float


@dataclass(frozen=True, slots=True)
class RankFacts:
    """One rank: its statistics, its configuration, its profiler window and the breakdown."""

    rank: int
    stats: RankStepStats
    config: RankConfig | None
    window: WindowSummary | None
    breakdown: Breakdown
    nvml_util_frac: float | None = None

    @property
    def window_steps(self) -> int:
        if self.window is None:
            return 0
        return max(1, self.window.last_step - self.window.first_step + 1)

    @property
    def busy_frac(self) -> float | None:
        """Share of the typical step the GPU was busy: the profiler window's GPU busy time per
        step (union of kernel/copy time) over the median *un-profiled* step, else NVML's mean
        utilisation of the rank's GPU (coarser: any kernel running counts).

        Not the window's own busy share: the profiler slows the host (each op and launch is
        recorded; +64% on the steps it covers, DESIGN.md), so the window's wall time is longer
        than a normal step while the GPU work is not, and ``1 - gpu_busy_frac`` counts the
        profiler's overhead as GPU idle time. On the H200 recordings the window's steps took
        1.1-2.4x the median step (``clean``: 9.26 ms vs 6.12 ms), which turned 11% of real idle
        time into a 40% "launch-bound" claim. The GPU busy time per step is what the profiler
        does not inflate, so it is set against the steps the user's run actually takes (the same
        median the data-wait and copy shares use).

        Not ``gpu_ms``: CUDA events at step boundaries measure the span between them on the
        GPU, which includes the GPU's idle gaps, so it is close to the host step time even when
        the GPU mostly waits.
        """
        w = self.window
        if w is not None and w.gpu_busy_frac is not None:
            frac = w.gpu_busy_frac
            if w.wall_ms and self.stats.step_ms > 0:
                busy_ms_per_step = w.gpu_busy_frac * w.wall_ms / self.window_steps
                frac = busy_ms_per_step / self.stats.step_ms
            return max(0.0, min(1.0, frac))
        return self.nvml_util_frac

    def per_step(self, window_ms: float) -> float:
        """A window total as milliseconds per step."""
        return window_ms / self.window_steps if self.window_steps else 0.0

    @property
    def exposed_comm_ms(self) -> float:
        """NCCL time per step that no compute kernel overlapped."""
        if self.window is None or not self.window.nccl_ms:
            return 0.0
        overlap = self.window.nccl_overlap_frac or 0.0
        return self.per_step(self.window.nccl_ms * (1.0 - overlap))

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

    @property
    def lead(self) -> RankFacts | None:
        """The rank the single-rank rules look at: rank 0, else the first one with steps."""
        return self.ranks[0] if self.ranks else None


def _breakdown(stats: RankStepStats, window: WindowSummary | None, steps: int) -> Breakdown:
    step = stats.step_ms
    data = min(step, stats.data_wait_ms)
    h2d = min(step - data, stats.h2d_ms or 0.0)
    sync = comm = 0.0
    if window is not None and steps:
        sync = min(step - data - h2d, window.sync_ms / steps)
        overlap = window.nccl_overlap_frac or 0.0
        comm = min(step - data - h2d - sync, window.nccl_ms * (1.0 - overlap) / steps)
    compute = max(0.0, step - data - h2d - sync - comm)
    return Breakdown(step_ms=step, data_wait_ms=data, h2d_ms=h2d, sync_ms=max(0.0, sync),
                     comm_ms=max(0.0, comm), compute_ms=compute)


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


def run_facts(run: RunData, thresholds: Thresholds) -> RunFacts:
    """Compute the facts of ``run`` (pure; reads only the loaded records)."""
    gpus = summarize_gpus(run.gpu)
    ranks = []
    for rank in run.ranks:
        window = run.windows.get(rank)
        # the profiler slows the steps of its window: keep them out of the step statistics
        exclude = None
        if window is not None:
            exclude = (window.first_step, window.last_step)
        elif len(run.manifest.profile_window) == 2:
            exclude = (run.manifest.profile_window[0], run.manifest.profile_window[1])
        stats = rank_step_stats(run.steps.get(rank, []), thresholds, exclude)
        if stats is None:
            continue
        n = max(1, window.last_step - window.first_step + 1) if window else 0
        config = run.configs.get(rank)
        ranks.append(RankFacts(rank=rank, stats=stats, config=config, window=window,
                               breakdown=_breakdown(stats, window, n),
                               nvml_util_frac=_nvml_util(gpus, config)))
    world = run.manifest.world_size or max(
        [c.world_size for c in run.configs.values()] + [len(run.ranks), 1])
    oom = run.oom is not None or any(r.stats.ooms for r in ranks)
    return RunFacts(ranks=tuple(ranks), gpus=tuple(gpus), world_size=world,
                    on_gpu=_uses_gpu(run), configs=dict(run.configs), ran_out_of_memory=oom)


__all__ = ["Breakdown", "RankFacts", "RunFacts", "main_loader", "run_facts"]
