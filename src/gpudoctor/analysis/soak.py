"""A soak verdict from NVML samples: how steady each GPU ran over a long job, and why not.

``gpudoctor monitor --summary`` (live, at the end of a ``--log`` run, or on a log read back) and
its live hints read these functions; nothing else computes these numbers. Pure: plain records in,
frozen dataclasses out (words are the view's job, ``report/soak_view.py``).

For each GPU:

* **mean, spread and fluctuation** of utilisation, SM and memory clocks, power and temperature.
  Spread is the population standard deviation; fluctuation is the spread as a percentage of the
  mean (the coefficient of variation), the figure of seed 002 §6: "sample
  ``nvidia-smi -q -d MEMORY,UTILIZATION`` every 5 s for 24 hours and confirm utilisation fluctuates
  under 5 %".
* **throttle time by reason**: each sample stands for the time until the next one (capped at
  ``GAP_FACTOR`` times the median interval, so a pause in the log is not counted as throttled).
* **memory trend**: memory used against time, a least-squares line (``analysis.steps``) over the
  whole soak and over its later half. A steady climb over minutes that is still climbing in the
  later half is leak-like (seed 000 §3.3: "fbs keeps growing -> a memory leak"); PyTorch's caching
  allocator grows in the first steps and then stays flat, which is not.

The decision limits are data, each with its reason, in :data:`SOAK_LIMITS`.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass, replace

from gpudoctor.analysis.steps import LineFit, least_squares, median
from gpudoctor.analysis.utilization import IDLE_UTIL_PCT, BytesTrend, bytes_trend
from gpudoctor.records.gpu import GpuSample, HostSample
from gpudoctor.records.units import MIB


@dataclass(frozen=True, slots=True)
class Limit:
    """One decision limit and why it sits there."""

    value: float
    reason: str


SOAK_LIMITS: dict[str, Limit] = {
    "fluctuation_pct": Limit(
        5.0, "seed 002 §6: a healthy 24-hour soak keeps GPU utilisation fluctuation under 5 %"),
    "idle_util_pct": Limit(
        IDLE_UTIL_PCT, "under this mean utilisation the GPU idled: the fluctuation of an idle GPU "
        "says nothing about the job (analysis.utilization's idle line)"),
    "throttle_share": Limit(
        0.05, "clocks held back by power or heat more than 5 % of the time cost the job measurably "
        "(SM clock and step time drop together); a few percent is boost management"),
    "min_samples": Limit(
        10.0, "fewer samples than this give no spread worth reporting"),
    "min_span_s": Limit(
        60.0, "a verdict on under a minute says nothing about hours: it is reported as too short, "
        "with what was seen so far"),
    "leak_min_span_s": Limit(
        120.0, "a leak shows as a climb over minutes; under two minutes the caching allocator's "
        "warm-up (it grows over the first steps, then stays flat) looks the same"),
    "leak_min_growth_bytes": Limit(
        256 * MIB, "below 256 MiB of growth the line is the allocator rounding segments, not a leak; "
        "a leaked batch of activations is hundreds of MiB"),
    "leak_min_r2": Limit(
        0.8, "a steady climb: the line explains most of the variation (a step up then flat, the "
        "allocator's warm-up, fits a line poorly)"),
    "leak_late_slope_frac": Limit(
        0.25, "the later half must still climb at a quarter of the whole soak's slope: memory "
        "that rose and then levelled off is a warm-up, not a leak"),
    "compute_bound_util_pct": Limit(
        80.0, "seed 000 §3.3: utilisation above 80 % with little PCIe traffic -> compute bound"),
    "low_pcie_bytes_per_s": Limit(
        1e9, "under 1 GB/s of PCIe rx+tx the host feeds the GPU little: ~2 % of the 55 GB/s "
        "pinned host-to-device copy measured on an H200 (DESIGN.md ceilings)"),
}

GAP_FACTOR = 3.0  # a sample counts for at most this many median intervals
STAT_METRICS: tuple[tuple[str, str], ...] = (
    ("util_gpu_pct", "utilization %"),
    ("sm_clock_mhz", "SM clock MHz"),
    ("mem_clock_mhz", "memory clock MHz"),
    ("power_w", "power W"),
    ("temperature_c", "temperature °C"),
)


@dataclass(frozen=True, slots=True)
class MetricStats:
    """One metric over the soak: ``mean``, ``spread`` (population standard deviation), ``low`` and
    ``high``, and ``fluctuation_pct`` (spread / mean x 100; ``None`` when the mean is 0)."""

    metric: str
    label: str
    samples: int
    mean: float
    spread: float
    low: float
    high: float
    fluctuation_pct: float | None


@dataclass(frozen=True, slots=True)
class MemoryTrend(BytesTrend):
    """Memory used against time (:class:`BytesTrend`: ``fit`` over the whole soak), ``late_fit``
    over its later half; ``leak_like`` when the climb passes every ``leak_*`` limit."""

    late_fit: LineFit | None
    leak_like: bool


@dataclass(frozen=True, slots=True)
class GpuSoak:
    """One GPU over the soak.

    Attributes:
        stats: :class:`MetricStats` of the metrics the GPU gave, in ``STAT_METRICS`` order.
        throttle_s: reason -> seconds the clocks were held back by it (``gpu_idle`` left out),
            most first. ``covered_s``: seconds the samples stand for; ``gap_s``: seconds of the
            span the samples do not cover (pauses in the log longer than ``GAP_FACTOR``
            intervals, e.g. two runs appended to one log).
        memory: the memory trend, ``None`` under 3 readings.
        ecc_errors: the largest volatile uncorrected ECC count seen (``None``: not given).
        problems: codes of what failed, in order: ``"fluctuation"``, ``"throttle"``,
            ``"memory_rising"``, ``"ecc"``. ``verdict``: ``"stable"``, ``"unstable"``, ``"idle"``
            or ``"too_short"``.
    """

    index: int
    name: str
    samples: int
    start_s: float
    end_s: float
    covered_s: float
    gap_s: float
    stats: tuple[MetricStats, ...]
    throttle_s: tuple[tuple[str, float], ...]
    memory: MemoryTrend | None
    ecc_errors: int | None
    problems: tuple[str, ...]
    verdict: str

    def stat(self, metric: str) -> MetricStats | None:
        return next((s for s in self.stats if s.metric == metric), None)

    def throttle_share(self, reason: str) -> float:
        seconds = dict(self.throttle_s).get(reason, 0.0)
        return seconds / self.covered_s if self.covered_s > 0 else 0.0


@dataclass(frozen=True, slots=True)
class HostSoak:
    """The host over the soak: CPU use and the memory of the job tree (or of the host)."""

    samples: int
    cpu: MetricStats | None
    memory_of: str  # "job tree RSS" or "host RAM used"
    memory: MemoryTrend | None


@dataclass(frozen=True, slots=True)
class SoakSummary:
    """Every GPU's :class:`GpuSoak` in index order, the host's, and the overall verdict
    (the worst of the GPUs': unstable > too_short > idle > stable; ``"no_samples"`` with none)."""

    gpus: tuple[GpuSoak, ...]
    host: HostSoak | None
    verdict: str


def metric_stats(values: Sequence[float], metric: str = "", label: str = "") -> MetricStats | None:
    """Mean, spread, range and fluctuation of ``values``; ``None`` when empty."""
    if not values:
        return None
    mean = statistics.fmean(values)
    spread = statistics.pstdev(values) if len(values) > 1 else 0.0
    return MetricStats(
        metric=metric, label=label, samples=len(values), mean=mean, spread=spread,
        low=min(values), high=max(values),
        fluctuation_pct=None if mean == 0 else 100.0 * spread / abs(mean),
    )


def memory_trend(points: Sequence[tuple[float, float]]) -> MemoryTrend | None:
    """Fit memory (bytes) against time (s) and judge it by the ``leak_*`` limits; ``None`` under
    3 points. Also the live leak hint's test, over the monitor's recent memory trail."""
    whole = bytes_trend(points)
    if whole is None:
        return None
    pts = sorted(points)
    t0, fit, span = pts[0][0], whole.fit, whole.span_s
    half = [p for p in pts if p[0] >= t0 + span / 2]
    late = least_squares([t - t0 for t, _ in half], [b for _, b in half])
    lim = SOAK_LIMITS
    leak = (
        span >= lim["leak_min_span_s"].value
        and fit.slope * span >= lim["leak_min_growth_bytes"].value
        and fit.r2 >= lim["leak_min_r2"].value
        and late is not None and late.slope >= lim["leak_late_slope_frac"].value * fit.slope
    )
    return MemoryTrend(fit=fit, first_bytes=whole.first_bytes, last_bytes=whole.last_bytes, span_s=span,
                       late_fit=late, leak_like=leak)


def _weights(times: Sequence[float]) -> list[float]:
    """Seconds each sample stands for: the time to the next one, capped at GAP_FACTOR medians."""
    gaps = [b - a for a, b in zip(times, times[1:])]
    typical = median([g for g in gaps if g > 0]) or 0.0
    cap = GAP_FACTOR * typical
    return [min(max(g, 0.0), cap) for g in gaps] + [typical]


def summarize_gpu(samples: Sequence[GpuSample]) -> GpuSoak:
    """The soak of one GPU's samples (any order; sorted by time here)."""
    group = sorted(samples, key=lambda s: s.timestamp_s)
    times = [s.timestamp_s for s in group]
    weights = _weights(times)
    stats = []
    for metric, label in STAT_METRICS:
        values = [float(v) for s in group if (v := getattr(s, metric)) is not None]
        st = metric_stats(values, metric, label)
        if st is not None:
            stats.append(st)
    throttle: dict[str, float] = {}
    for s, w in zip(group, weights):
        for reason in s.throttle_reasons:
            if reason != "gpu_idle":
                throttle[reason] = throttle.get(reason, 0.0) + w
    mem = memory_trend([(s.timestamp_s, float(s.mem_used_bytes)) for s in group
                        if s.mem_used_bytes is not None])
    eccs = [s.ecc_errors_uncorrected for s in group if s.ecc_errors_uncorrected is not None]
    covered = sum(weights)
    soak = GpuSoak(
        index=group[0].index, name=group[0].name, samples=len(group), start_s=times[0],
        end_s=times[-1], covered_s=covered,
        gap_s=max(0.0, times[-1] - times[0] - sum(weights[:-1])), stats=tuple(stats),
        throttle_s=tuple(sorted(throttle.items(), key=lambda kv: (-kv[1], kv[0]))),
        memory=mem, ecc_errors=max(eccs) if eccs else None, problems=(), verdict="",
    )
    problems = _problems(soak)
    return replace(soak, problems=problems, verdict=_verdict(soak, problems))


def _problems(soak: GpuSoak) -> tuple[str, ...]:
    lim = SOAK_LIMITS
    out = []
    util = soak.stat("util_gpu_pct")
    busy = util is not None and util.mean >= lim["idle_util_pct"].value
    if busy and util.fluctuation_pct is not None and \
            util.fluctuation_pct >= lim["fluctuation_pct"].value:
        out.append("fluctuation")
    if any(soak.throttle_share(r) >= lim["throttle_share"].value for r, _ in soak.throttle_s):
        out.append("throttle")
    if soak.memory is not None and soak.memory.leak_like:
        out.append("memory_rising")
    if soak.ecc_errors:
        out.append("ecc")
    return tuple(out)


def _verdict(soak: GpuSoak, problems: tuple[str, ...]) -> str:
    if soak.samples < SOAK_LIMITS["min_samples"].value \
            or soak.end_s - soak.start_s < SOAK_LIMITS["min_span_s"].value:
        return "too_short"
    if problems:
        return "unstable"
    util = soak.stat("util_gpu_pct")
    if util is not None and util.mean < SOAK_LIMITS["idle_util_pct"].value:
        return "idle"
    return "stable"


_ORDER = {"unstable": 3, "too_short": 2, "idle": 1, "stable": 0}


def summarize_host(samples: Sequence[HostSample]) -> HostSoak | None:
    """CPU stats and the memory trend of the job tree (when ``--pid`` was given) or of the host."""
    if not samples:
        return None
    cpu = metric_stats([s.cpu_pct for s in samples if s.cpu_pct is not None], "cpu_pct", "CPU %")
    tree = [(s.timestamp_s, float(s.tree_rss_bytes)) for s in samples if s.tree_rss_bytes]
    if tree:
        return HostSoak(samples=len(samples), cpu=cpu, memory_of="job tree RSS",
                        memory=memory_trend(tree))
    ram = [(s.timestamp_s, float(s.ram_used_bytes)) for s in samples if s.ram_used_bytes]
    return HostSoak(samples=len(samples), cpu=cpu, memory_of="host RAM used", memory=memory_trend(ram))


def summarize_soak(gpu_samples: Sequence[GpuSample],
                   host_samples: Sequence[HostSample] = ()) -> SoakSummary:
    """Summarise a soak: one :class:`GpuSoak` per GPU index, the host, the overall verdict."""
    by_index: dict[int, list[GpuSample]] = {}
    for s in gpu_samples:
        by_index.setdefault(s.index, []).append(s)
    gpus = tuple(summarize_gpu(by_index[i]) for i in sorted(by_index))
    verdict = max((g.verdict for g in gpus), key=_ORDER.__getitem__) if gpus else "no_samples"
    return SoakSummary(gpus=gpus, host=summarize_host(host_samples), verdict=verdict)


def compute_bound(sample: GpuSample) -> bool:
    """Seed 000 §3.3: utilisation above 80 % while PCIe rx+tx stays under 1 GB/s (both known)."""
    if sample.util_gpu_pct is None or sample.pcie_rx_bytes_per_s is None \
            or sample.pcie_tx_bytes_per_s is None:
        return False
    return (sample.util_gpu_pct > SOAK_LIMITS["compute_bound_util_pct"].value
            and sample.pcie_rx_bytes_per_s + sample.pcie_tx_bytes_per_s
            < SOAK_LIMITS["low_pcie_bytes_per_s"].value)


__all__ = [
    "GAP_FACTOR", "SOAK_LIMITS", "STAT_METRICS", "GpuSoak", "HostSoak", "Limit", "MemoryTrend",
    "MetricStats", "SoakSummary", "compute_bound", "memory_trend", "metric_stats", "summarize_gpu",
    "summarize_host", "summarize_soak",
]
