"""Copy bandwidth: host->device and device->host, pinned vs pageable, and device->device.

H2D/D2H count the bytes copied once (what crosses PCIe); their reference is the PCIe line rate
of the GPU's link. D2D counts bytes read + written (2 x the buffer: a copy reads and writes HBM
once each), so it compares with the datasheet memory bandwidth. On a CPU-only machine a host
memcpy is measured instead, also counted as read + written. GB/s are 10^9 bytes per second.
"""

from __future__ import annotations

from collections.abc import Callable

from gpudoctor.bench.links import pcie_gbs
from gpudoctor.bench.protocol import Protocol, median_ms, throughput, time_gpu, time_host
from gpudoctor.core.specs import match_spec
from gpudoctor.records.bench import BenchResult, LinkState

from gpudoctor.records.units import GIB, KIB
from gpudoctor.records.units import MIB as MiB

GPU_HOST_SIZE = 256 * MiB
GPU_D2D_SIZE = 1024 * MiB  # one 1 GiB copy is ~0.5 ms at H200 speed: large enough to saturate HBM
CPU_SIZE = 64 * MiB  # well past the last-level cache, so it measures DRAM
QUICK_SIZE = 64 * MiB
GPU_PROTOCOL = Protocol(warmup=3, repeats=10)
CPU_PROTOCOL = Protocol(warmup=1, repeats=5)
LOAD_COPIES = 20  # extra pinned copies queued behind the timed ones while the PCIe link is read


def size_label(nbytes: int) -> str:
    """``268435456`` -> ``"256 MiB"``; exact binary units when they fit, else bytes."""
    for unit, factor in (("GiB", GIB), ("MiB", MiB), ("KiB", KIB)):
        if nbytes >= factor and nbytes % factor == 0:
            return f"{nbytes // factor} {unit}"
    return f"{nbytes} B"


def run_copy(
    device,
    *,
    sizes: tuple[int, ...] | None = None,
    quick: bool = False,
    during: Callable[[], LinkState] | None = None,
) -> tuple[list[BenchResult], LinkState | None]:
    """Measure copy bandwidth on ``device``; return the results and the link read under copy load.

    ``during`` is called while pinned H2D copies are in flight (the PCIe link may train down
    when idle, so it is read under load).
    """
    if device.type != "cuda":
        return _host_memcpy(sizes or ((QUICK_SIZE,) if quick else (CPU_SIZE,))), None
    import torch

    results: list[BenchResult] = []
    under_load: LinkState | None = None
    host_sizes = sizes or ((QUICK_SIZE,) if quick else (GPU_HOST_SIZE,))
    for nbytes in host_sizes:
        gpu = torch.empty(nbytes, dtype=torch.uint8, device=device)
        pinned = torch.empty(nbytes, dtype=torch.uint8, pin_memory=True).fill_(7)
        pageable = torch.empty(nbytes, dtype=torch.uint8).fill_(7)  # fill: fault the pages in now
        runs = {
            "h2d_pinned": lambda: gpu.copy_(pinned, non_blocking=True),
            "h2d_pageable": lambda: gpu.copy_(pageable),
            "d2h_pinned": lambda: pinned.copy_(gpu, non_blocking=True),
            "d2h_pageable": lambda: pageable.copy_(gpu),
        }
        timed: dict[str, list[float]] = {}
        for op, call in runs.items():
            hook = None
            if op == "h2d_pinned" and during is not None and under_load is None:
                def hook(call=call):
                    nonlocal under_load
                    for _ in range(LOAD_COPIES):
                        call()
                    under_load = during()
            timed[op] = time_gpu(call, GPU_PROTOCOL, during=hook)
        del gpu, pinned, pageable
        link_peak = None
        if under_load is not None:
            link_peak = pcie_gbs(under_load.pcie_gen_max, under_load.pcie_width_max)
        for op, times in timed.items():
            results.append(_host_link_result(op, nbytes, times, device, link_peak, under_load, timed))
    results += _d2d(torch, device, sizes or ((QUICK_SIZE * 4,) if quick else (GPU_D2D_SIZE,)))
    torch.cuda.empty_cache()
    return results, under_load


def _host_link_result(op, nbytes, times, device, link_peak, link: LinkState | None, timed) -> BenchResult:
    pinned = op.endswith("pinned")
    note = "bytes copied once (PCIe one way)"
    if not pinned:
        other = op.replace("pageable", "pinned")
        ratio = median_ms(times) / median_ms(timed[other])
        note = (
            f"pageable memory is staged through a pinned buffer: {ratio:.1f}x slower than pinned "
            "here; use DataLoader(pin_memory=True) and .to(device, non_blocking=True)"
        )
    source = ""
    if link_peak is not None and link is not None:
        source = f"PCIe Gen{link.pcie_gen_max} x{link.pcie_width_max} line rate, one direction"
    return _result(op, nbytes, nbytes, str(device), times, note=note,
                   peak=link_peak if pinned else None, peak_source=source if pinned else "")


def _d2d(torch, device, sizes: tuple[int, ...]) -> list[BenchResult]:
    spec = match_spec(torch.cuda.get_device_name(device))
    peak = spec.mem_bandwidth_gbs if spec is not None else None
    source = f"{spec.name} datasheet memory bandwidth" if spec is not None else ""
    results = []
    for nbytes in sizes:
        src = torch.empty(nbytes, dtype=torch.uint8, device=device).fill_(7)
        dst = torch.empty_like(src)
        times = time_gpu(lambda: dst.copy_(src), GPU_PROTOCOL)
        del src, dst
        results.append(_result("d2d", nbytes, 2 * nbytes, str(device), times, peak=peak, peak_source=source,
                               note="counts bytes read + written (2 x the buffer)"))
    return results


def _host_memcpy(sizes: tuple[int, ...]) -> list[BenchResult]:
    import torch

    results = []
    for nbytes in sizes:
        src = torch.empty(nbytes, dtype=torch.uint8).fill_(7)
        dst = torch.empty_like(src)
        times = time_host(lambda: dst.copy_(src), CPU_PROTOCOL)
        del src, dst
        results.append(_result("host_memcpy", nbytes, 2 * nbytes, "cpu", times,
                               note="CPU: counts bytes read + written (2 x the buffer); no reference to compare with"))
    return results


def _result(op: str, nbytes: int, counted: int, device: str, times: list[float], *, note: str,
            peak: float | None = None, peak_source: str = "") -> BenchResult:
    """One copy figure: ``counted`` bytes per copy of an ``nbytes`` buffer over ``times`` (ms)."""
    stats = throughput(counted, times, scale=1e9)
    return BenchResult(
        section="copy", op=op, size=size_label(nbytes), size_bytes=counted, device=device, unit="GB/s",
        median=stats.median, p10=stats.p10, p90=stats.p90, repeats=stats.count, time_ms=median_ms(times),
        peak=peak, peak_source=peak_source, fraction_of_peak=stats.median / peak if peak else None, note=note,
    )
