"""Judge each benchmark figure: normal or low for this GPU and link, and what usually causes low.

Pure: a :class:`BenchReport` in, a new one out with ``verdict`` and ``note`` set. The reference
(``peak``) was filled in by the benchmark: datasheet peak for matmul, HBM bandwidth for D2D,
PCIe line rate for pinned H2D/D2H, NVLink or PCIe bandwidth per direction for collectives.
The evidence for "why low" comes from the :class:`LinkState` records (NVML and torch readings)
and the ``NCCL_*`` environment, so a low figure is explained by what was observed, not guessed.
"""

from __future__ import annotations

from dataclasses import dataclass, fields, replace

from gpudoctor.records.bench import BenchReport, BenchResult, BenchVerdict, LinkState
from gpudoctor.records.units import MIB

_GENERIC = {
    "matmul": (
        "usually a power cap, thermal or power throttling, locked clocks, another process on the "
        "GPU or a MIG slice (nvidia-smi -q -d POWER,PERFORMANCE,CLOCK; nvidia-smi for other processes)"
    ),
    "pcie": (
        "usually a narrow or down-trained PCIe link (nvidia-smi -q -d PCIE), the process on the "
        "CPU socket far from the GPU (bind with numactl to the GPU's NUMA node), IOMMU translation, "
        "or a PCIe switch shared with other busy devices"
    ),
    "d2d": "usually throttling or a reduced memory clock (nvidia-smi -q -d CLOCK,PERFORMANCE)",
    "collectives": (
        "usually NVLink off or absent, P2P disabled (nvidia-smi topo -m; ACS/IOMMU in the BIOS), "
        "NCCL_P2P_DISABLE / NCCL_P2P_LEVEL / NCCL_ALGO set, or GPUs on different PCIe root complexes"
    ),
}


@dataclass(frozen=True, kw_only=True)
class BenchThresholds:
    """Below ``low`` x reference a figure is LOW; above ``high`` x reference it is HIGH (suspicious).

    Defaults leave room under what one H200 SXM gives with plain PyTorch (DESIGN.md, measured):
    bf16 matmul 784 of 989 TFLOP/s (0.79), tf32 0.88, fp32 0.76; pinned H2D 55.5 GB/s of the
    63 GB/s Gen5 x16 line rate (0.88); D2D 4.27 of 4.8 TB/s (0.89); 2-GPU NVLink all_reduce busbw
    328 of 450 GB/s (0.73). A figure under these limits is well outside run-to-run noise.

    Attributes:
        matmul_low: fp32/tf32/bf16/fp16 matmul, fraction of the datasheet dense peak.
        fp8_low: fp8 matmul (``torch._scaled_mm`` reaches a smaller share of the fp8 peak).
        pcie_low: pinned H2D/D2H, fraction of the PCIe line rate.
        d2d_low: device-to-device copy (read + write), fraction of the HBM bandwidth.
        collective_low: collective busbw, fraction of the link bandwidth per direction.
        collective_min_bytes: smaller collectives are latency-bound and not judged.
        high: above this fraction of the reference the reference itself is suspect.
        power_cap_frac: a power limit under this share of the default counts as a power cap.
        clock_frac: an SM clock under load below this share of the maximum counts as held back.
    """

    matmul_low: float = 0.6
    fp8_low: float = 0.4
    pcie_low: float = 0.7
    d2d_low: float = 0.6
    collective_low: float = 0.5
    collective_min_bytes: int = 256 * MIB
    high: float = 1.05
    power_cap_frac: float = 0.95
    clock_frac: float = 0.9

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            if f.name in ("high", "collective_min_bytes"):
                continue
            if not 0.0 < value <= 1.0:
                raise ValueError(f"{f.name}={value} must be a fraction in (0, 1]")
        if self.high < 1.0:
            raise ValueError(f"high={self.high} must be at least 1.0 (a fraction of the reference)")
        if self.collective_min_bytes < 0:
            raise ValueError(f"collective_min_bytes={self.collective_min_bytes} must be 0 or more")


def _power_and_clocks(link: LinkState | None, t: BenchThresholds) -> list[str]:
    if link is None:
        return []
    causes = []
    if link.power_limit_w and link.default_power_limit_w and (
        link.power_limit_w < t.power_cap_frac * link.default_power_limit_w
    ):
        causes.append(
            f"power capped at {link.power_limit_w:.0f} W of the default {link.default_power_limit_w:.0f} W "
            "(raise it: nvidia-smi -pl)"
        )
    if link.throttle_reasons:
        causes.append(f"clocks held back under load: {', '.join(link.throttle_reasons)}")
    if link.sm_clock_mhz and link.max_sm_clock_mhz and link.sm_clock_mhz < t.clock_frac * link.max_sm_clock_mhz:
        causes.append(f"SM clock {link.sm_clock_mhz} of max {link.max_sm_clock_mhz} MHz under load")
    return causes


def _pcie(link: LinkState | None) -> list[str]:
    if link is None or not link.pcie_gen_current or not link.pcie_width_current:
        return []
    causes = []
    if link.pcie_gen_max and link.pcie_gen_current < link.pcie_gen_max:
        causes.append(f"PCIe link trained down to Gen{link.pcie_gen_current} (max Gen{link.pcie_gen_max})")
    if link.pcie_width_max and link.pcie_width_current < link.pcie_width_max:
        causes.append(f"PCIe link runs x{link.pcie_width_current} of x{link.pcie_width_max}")
    if link.pcie_width_max and link.pcie_width_max < 16:
        causes.append(f"the slot gives only x{link.pcie_width_max} lanes")
    return causes


def _collective_causes(links: tuple[LinkState, ...], env: dict[str, str]) -> list[str]:
    causes = []
    first = links[0] if links else None
    if first is not None and first.nvlink_active_links == 0:
        causes.append("no active NVLink: traffic goes over PCIe")
    if first is not None and first.p2p_peers == ():
        causes.append("P2P access between the GPUs is off: NCCL copies through host memory")
    for key in ("NCCL_P2P_DISABLE", "NCCL_SHM_DISABLE"):
        if env.get(key, "0") not in ("0", ""):
            causes.append(f"{key}={env[key]} is set")
    for key in ("NCCL_P2P_LEVEL", "NCCL_ALGO", "NCCL_PROTO"):
        if env.get(key):
            causes.append(f"{key}={env[key]} forces NCCL's choice")
    return causes


def _join(*parts: str) -> str:
    return "; ".join(p for p in parts if p)


def judge_result(
    result: BenchResult,
    *,
    links: tuple[LinkState, ...] = (),
    nccl_env: dict[str, str] | None = None,
    thresholds: BenchThresholds = BenchThresholds(),
) -> BenchResult:
    """Set ``verdict`` and extend ``note`` of one figure."""
    t = thresholds
    first = links[0] if links else None
    if result.section == "collectives" and "cuda" not in result.device:
        return replace(result, verdict=BenchVerdict.UNJUDGED, note=_join(
            result.note, "CPU (gloo): a sanity check, no link reference"))
    if result.section == "collectives" and (result.size_bytes or 0) < t.collective_min_bytes:
        return replace(result, verdict=BenchVerdict.UNJUDGED, note=_join(
            result.note, f"latency-bound size: judged from {t.collective_min_bytes // MIB} MiB up"))
    if result.peak is None or result.median is None or result.peak <= 0:
        return replace(result, verdict=BenchVerdict.UNJUDGED)
    fraction = result.median / result.peak
    if result.section == "matmul":
        low, causes, generic = (t.fp8_low if result.dtype == "fp8" else t.matmul_low), _power_and_clocks(first, t), "matmul"
    elif result.op == "d2d":
        low, causes, generic = t.d2d_low, _power_and_clocks(first, t), "d2d"
    elif result.section == "copy":
        low, causes, generic = t.pcie_low, _pcie(first), "pcie"
    elif result.section == "collectives":
        low, causes, generic = t.collective_low, _collective_causes(links, nccl_env or {}), "collectives"
    else:
        return replace(result, verdict=BenchVerdict.UNJUDGED)
    if fraction > t.high:
        return replace(result, fraction_of_peak=fraction, verdict=BenchVerdict.HIGH, note=_join(
            result.note, f"{fraction:.0%} of the reference: the reference ({result.peak_source}) "
            "may not match this machine"))
    if fraction < low:
        why = "; ".join(causes) if causes else _GENERIC[generic]
        return replace(result, fraction_of_peak=fraction, verdict=BenchVerdict.LOW, note=_join(
            result.note, f"LOW: {fraction:.0%} of the reference, under {low:.0%}: {why}"))
    return replace(result, fraction_of_peak=fraction, verdict=BenchVerdict.NORMAL)


def judge(report: BenchReport, thresholds: BenchThresholds = BenchThresholds()) -> BenchReport:
    """A copy of ``report`` with every figure judged."""
    judged = tuple(
        judge_result(r, links=report.links, nccl_env=report.nccl_env, thresholds=thresholds)
        for r in report.results
    )
    return replace(report, results=judged)
