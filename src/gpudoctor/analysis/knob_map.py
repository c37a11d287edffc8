"""Which ``--try`` knobs verify which finding: the prescription as something gpudoctor can test.

Only findings whose fix can be injected safely into an unmodified script map to knobs; the rest
(an ``.item()`` per step, a leak through a kept graph) need an edit and are not re-run. Where a
fix names values (the worker count), the rule's fix text and the knobs come from the same
function here (:func:`loader_plan`), so the printed fix quotes exactly the values tried.
"""

from __future__ import annotations

from dataclasses import dataclass

from gpudoctor.analysis.facts import main_loader
from gpudoctor.records.finding import Finding
from gpudoctor.records.run import LoaderConfig, RankConfig

# DataLoader workers: up to this many for a loader with fewer, when the rank has the cores. Past
# about 8, each extra worker mostly adds start-up time and RAM for a typical per-sample pipeline;
# a loader that already has 8 or more and still starves the step gets twice as many (cores
# permitting): the workers are then the bottleneck, not their start-up.
WORKERS_FIRST_STEP = 8
PREFETCH_FACTOR = 4  # batches each worker prepares ahead (PyTorch's default is 2)


def cores_per_rank(config: RankConfig | None) -> int | None:
    """The CPUs one rank's loader may use: the rank's usable CPUs over the ranks on its node."""
    if config is None or not config.usable_cpus:
        return None
    return max(config.usable_cpus // max(config.local_world_size or 1, 1), 1)


def loader_workers(cores: int, current: int = 0) -> int:
    """Workers for a rank with ``cores`` CPUs whose loader has ``current``: one core is left for
    the training process; at most :data:`WORKERS_FIRST_STEP`, or twice ``current`` past it."""
    available = max(cores - 1, 1)
    if current < WORKERS_FIRST_STEP:
        return min(WORKERS_FIRST_STEP, available)
    return min(2 * current, available)


@dataclass(frozen=True, slots=True, kw_only=True)
class LoaderPlan:
    """The DataLoader settings a data-loader finding prescribes, all from one place.

    ``workers`` is ``None`` when the worker count stays (already enough for the cores, or the
    cores are unknown); the other fields are ``True``/a value only where they change something.
    """

    current_workers: int
    workers: int | None
    cores: int | None
    usable_cpus: int | None
    local_world_size: int | None
    pin_memory: bool
    persistent_workers: bool
    prefetch_factor: int | None
    non_blocking: bool

    def knobs(self) -> str | None:
        """The ``--try`` spec that applies exactly this plan, or ``None`` when nothing changes."""
        parts = [f"num_workers={self.workers}"] if self.workers is not None else []
        parts += [name for name in ("pin_memory", "persistent_workers") if getattr(self, name)]
        if self.prefetch_factor is not None:
            parts.append(f"prefetch_factor={self.prefetch_factor}")
        if self.non_blocking:
            parts.append("non_blocking")
        return ",".join(parts) or None


def loader_plan(loader: LoaderConfig | None, config: RankConfig | None, on_gpu: bool) -> LoaderPlan:
    """What to change in ``loader`` (the one the loop iterates) on a rank configured as ``config``."""
    current = loader.num_workers if loader is not None else 0
    cores = cores_per_rank(config)
    target = loader_workers(cores, current) if cores is not None else None
    workers = target if target is not None and target > current else None
    with_workers = (workers or current) > 0
    return LoaderPlan(
        current_workers=current, workers=workers, cores=cores,
        usable_cpus=config.usable_cpus if config is not None else None,
        local_world_size=config.local_world_size if config is not None else None,
        pin_memory=on_gpu and not (loader is not None and loader.pin_memory),
        persistent_workers=with_workers and not (loader is not None and loader.persistent_workers),
        prefetch_factor=(PREFETCH_FACTOR if with_workers and ((loader.prefetch_factor if loader else None)
                                                               or 2) < PREFETCH_FACTOR else None),
        non_blocking=on_gpu,
    )


def _on_gpu(config: RankConfig | None) -> bool:
    return config is not None and config.device.startswith("cuda")


def knobs_for(finding: Finding, config: RankConfig | None) -> str | None:
    """The ``--try`` knob string that tests ``finding``'s fix, or ``None`` when none can.

    ``config`` is the configuration of the rank the finding is about (the run's lowest rank
    will do: the rules read the same settings on every rank of a single-node job).
    """
    code = finding.code
    on_gpu = _on_gpu(config)
    if code == "GD-RUN-DATALOADER":
        return loader_plan(main_loader(config), config, on_gpu).knobs()
    if code == "GD-RUN-H2D-PAGEABLE":
        return "pin_memory,non_blocking"
    if code == "GD-RUN-H2D-BLOCKING":
        return "non_blocking"
    if code == "GD-RUN-FP32-COMPUTE":
        return ",".join(fp32_knobs(config))
    if code == "GD-RUN-LAUNCH-BOUND":
        return "compile"
    if code == "GD-RUN-CHANNELS-LAST":
        return "channels_last"  # the model and its 4-D inputs, as the fix's two lines
    if code == "GD-RUN-CUDNN-BENCHMARK":
        return "cudnn_benchmark"
    if code == "GD-RUN-FRAGMENTATION":
        return "expandable_segments"
    return None


def fp32_knobs(config: RankConfig | None) -> list[str]:
    """The knobs of the fp32-compute fix, line for line (analysis/compute_rules.check_fp32_compute):
    cudnn.benchmark where off, TF32 where off, channels_last for a conv net not in it, bf16."""
    knobs = []
    if config is None or not config.cudnn_benchmark:
        knobs.append("cudnn_benchmark")
    if config is None or not (config.tf32_matmul or config.float32_matmul_precision in ("high", "medium")):
        knobs.append("tf32")
    if config is not None and config.channels_last is False:
        knobs.append("channels_last")
    knobs.append("bf16")
    return knobs


def first_testable(findings: list[Finding], config: RankConfig | None) -> tuple[Finding, str] | None:
    """The highest-ranked finding whose fix can be tried, with its knobs."""
    for finding in findings:
        if finding.severity.value == "info":
            continue
        knobs = knobs_for(finding, config)
        if knobs is not None:
            return finding, knobs
    return None
