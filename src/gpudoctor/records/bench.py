"""Benchmark results: the measured ceilings of one machine (``gpudoctor bench``).

A :class:`BenchResult` is one figure (e.g. bf16 matmul at 8192³ in TFLOP/s) with its spread over
the repeated runs, the reference it is judged against and the verdict. :class:`LinkState` holds
the evidence that explains a low figure (PCIe link, NVLink, P2P, power cap, clocks, throttling).
"""

from __future__ import annotations

import enum

from gpudoctor.records.base import record

KIND_BENCH = "bench_report"


class BenchVerdict(enum.Enum):
    """How a figure compares with what this GPU and link should give.

    ``UNJUDGED`` means there is no trustworthy reference (CPU figures, gloo, latency-bound
    sizes, an unknown GPU) — the note says which.
    """

    NORMAL = "normal"
    LOW = "low"
    HIGH = "high"
    UNJUDGED = "unjudged"


@record
class BenchResult:
    """One measured figure.

    Attributes:
        section: ``matmul``, ``copy``, ``collectives`` or ``loader``.
        op: what was timed, e.g. ``matmul``, ``h2d_pinned``, ``all_reduce``, ``loader``.
        dtype: element type (``bf16``, ``fp8``, ...) or ``""`` where it does not apply.
        size: human label of the problem size (``8192x8192x8192``, ``256 MiB``, ``workers=4``).
        size_bytes: bytes moved per run (copies, collectives); ``None`` for matmul and loader.
        device: where it ran (``cuda:0``, ``cpu``, ``2 x cuda (nccl)``).
        unit: unit of ``median``/``p10``/``p90`` (``TFLOP/s``, ``GFLOP/s``, ``GB/s``, ``samples/s``).
        median: median throughput over the repeats.
        p10: 10th percentile of the throughput (the slower runs).
        p90: 90th percentile of the throughput (the faster runs).
        repeats: how many timed runs (after warm-up) the figures come from.
        time_ms: median time of one run in milliseconds.
        peak: the reference in ``unit`` (datasheet peak, PCIe/NVLink line rate), or ``None``.
        peak_source: where ``peak`` comes from, in words.
        fraction_of_peak: ``median / peak``; ``None`` without a peak.
        verdict: normal / low / high / unjudged (set by ``analysis.bench_rules``).
        note: how the figure is counted, and for a low figure what usually causes it.
        algbw_gbs: collectives only: algorithm bandwidth (bytes / time), median, GB/s.
    """

    section: str
    op: str
    dtype: str = ""
    size: str = ""
    size_bytes: int | None = None
    device: str = ""
    unit: str = ""
    median: float | None = None
    p10: float | None = None
    p90: float | None = None
    repeats: int = 0
    time_ms: float | None = None
    peak: float | None = None
    peak_source: str = ""
    fraction_of_peak: float | None = None
    verdict: BenchVerdict = BenchVerdict.UNJUDGED
    note: str = ""
    algbw_gbs: float | None = None


@record
class BenchSkip:
    """A benchmark that did not run, and why (``fp8`` on a GPU without fp8 tensor cores, ...)."""

    section: str
    what: str
    reason: str


@record
class LinkState:
    """Evidence about one GPU's links and power, read through NVML and torch.

    Command-line equivalent: ``nvidia-smi -q -d PCIE,POWER,CLOCK,PERFORMANCE`` and
    ``nvidia-smi topo -m``. A field NVML cannot give is ``None``; the reason is in ``unavailable``.
    """

    index: int
    name: str = ""
    pcie_gen_current: int | None = None
    pcie_width_current: int | None = None
    pcie_gen_max: int | None = None
    pcie_width_max: int | None = None
    nvlink_active_links: int | None = None
    nvlink_version: int | None = None
    p2p_peers: tuple[int, ...] | None = None
    power_limit_w: float | None = None
    default_power_limit_w: float | None = None
    sm_clock_mhz: int | None = None
    max_sm_clock_mhz: int | None = None
    throttle_reasons: tuple[str, ...] = ()
    unavailable: dict[str, str] | None = None


@record
class BenchReport:
    """Everything one ``gpudoctor bench`` run measured, skipped and observed."""

    device_name: str
    gpu_count: int
    torch_version: str
    results: tuple[BenchResult, ...] = ()
    skipped: tuple[BenchSkip, ...] = ()
    links: tuple[LinkState, ...] = ()
    nccl_env: dict[str, str] | None = None
    duration_s: float = 0.0

    @property
    def low(self) -> tuple[BenchResult, ...]:
        return tuple(r for r in self.results if r.verdict is BenchVerdict.LOW)
