"""Fixed benchmark reports for the rule and view tests.

The figures are DESIGN.md's independent measurements on one / two H200 SXM (bf16 784, tf32 434,
fp32 51 TFLOP/s; H2D pinned 55.5, pageable 21.4 GB/s; D2D 4270 GB/s; 2-GPU all_reduce busbw 328
GB/s at 1 GiB); the spreads and the remaining figures are made-up test inputs, not claims.
"""

from __future__ import annotations

import pytest

from gpudoctor.records.bench import BenchReport, BenchResult, BenchSkip, LinkState

GiB = 1 << 30
MiB = 1 << 20


def matmul(dtype: str, median: float, peak: float | None, note: str = "") -> BenchResult:
    return BenchResult(
        section="matmul", op="matmul", dtype=dtype, size="8192x8192x8192", device="cuda:0",
        unit="TFLOP/s", median=median, p10=median * 0.98, p90=median * 1.01, repeats=20,
        time_ms=2 * 8192**3 / (median * 1e12) * 1e3, peak=peak,
        peak_source="NVIDIA H200 SXM datasheet, dense" if peak else "",
        fraction_of_peak=median / peak if peak else None, note=note,
    )


def copy(op: str, median: float, peak: float | None, size: int = 256 * MiB, note: str = "") -> BenchResult:
    return BenchResult(
        section="copy", op=op, size=f"{size // MiB} MiB", size_bytes=size, device="cuda:0", unit="GB/s",
        median=median, p10=median * 0.97, p90=median * 1.01, repeats=10, time_ms=size / (median * 1e9) * 1e3,
        peak=peak, peak_source="PCIe Gen5 x16 line rate, one direction" if peak else "",
        fraction_of_peak=median / peak if peak else None, note=note,
    )


def collective(op: str, size: int, busbw: float, factor: float, peak: float | None = 450.0) -> BenchResult:
    algbw = busbw / factor
    label = f"{size // GiB} GiB" if size >= GiB else f"{size // MiB} MiB"
    return BenchResult(
        section="collectives", op=op, dtype="fp32", size=label, size_bytes=size, device="2 x cuda (nccl)",
        unit="GB/s", median=busbw, p10=busbw * 0.99, p90=busbw * 1.005, repeats=20,
        time_ms=size / (algbw * 1e9) * 1e3, algbw_gbs=algbw, peak=peak,
        peak_source="NVLink, 18 active links, one direction" if peak else "",
        fraction_of_peak=busbw / peak if peak else None, note=f"busbw = algbw x {factor:g} (nccl-tests)",
    )


def h200_link(**overrides) -> LinkState:
    values = dict(
        index=0, name="NVIDIA H200", pcie_gen_current=5, pcie_width_current=16, pcie_gen_max=5,
        pcie_width_max=16, nvlink_active_links=18, nvlink_version=4, p2p_peers=(1,), power_limit_w=700.0,
        default_power_limit_w=700.0, sm_clock_mhz=1980, max_sm_clock_mhz=1980,
    )
    values.update(overrides)
    return LinkState(**values)


@pytest.fixture
def gpu_report() -> BenchReport:
    results = (
        matmul("fp32", 51.0, 66.9, "TF32 off (float32_matmul_precision='highest')"),
        matmul("tf32", 434.0, 494.7, "fp32 inputs, TF32 tensor cores (float32_matmul_precision='high')"),
        matmul("bf16", 784.0, 989.4),
        matmul("fp16", 350.0, 989.4),
        copy("h2d_pinned", 55.5, 63.0, note="bytes copied once (PCIe one way)"),
        copy("h2d_pageable", 21.4, None, note="pageable memory is staged through a pinned buffer: 2.6x slower than pinned here; use DataLoader(pin_memory=True) and .to(device, non_blocking=True)"),
        copy("d2h_pinned", 30.0, 63.0, note="bytes copied once (PCIe one way)"),
        copy("d2d", 4270.0, 4800.0, size=2 * GiB, note="counts bytes read + written (2 x the buffer)"),
        collective("all_reduce", 1 * MiB, 40.0, 1.0),
        collective("all_reduce", 1 * GiB, 328.0, 1.0),
        collective("all_gather", 1 * GiB, 150.0, 0.5),
    )
    return BenchReport(
        device_name="NVIDIA H200", gpu_count=2, torch_version="2.11.0+cu130", results=results,
        skipped=(BenchSkip(section="matmul", what="fp8", reason="example skip reason"),),
        links=(h200_link(), h200_link(index=1, p2p_peers=(0,))),
        nccl_env={"NCCL_NVLS_ENABLE": "0"}, duration_s=21.5,
    )


@pytest.fixture
def cpu_report() -> BenchReport:
    return BenchReport(
        device_name="cpu", gpu_count=0, torch_version="2.14.1+cpu",
        results=(
            BenchResult(section="matmul", op="matmul", dtype="fp32", size="1024x1024x1024", device="cpu",
                        unit="GFLOP/s", median=60.0, p10=55.0, p90=61.0, repeats=5, time_ms=35.8,
                        note="CPU: no datasheet peak to compare with"),
            BenchResult(section="copy", op="host_memcpy", size="256 MiB", size_bytes=512 * MiB, device="cpu",
                        unit="GB/s", median=5.5, p10=4.9, p90=6.0, repeats=5, time_ms=97.6,
                        note="CPU: counts bytes read + written (2 x the buffer); no reference to compare with"),
            BenchResult(section="collectives", op="all_reduce", dtype="fp32", size="4 MiB", size_bytes=4 * MiB,
                        device="2 x cpu (gloo)", unit="GB/s", median=1.2, p10=0.7, p90=1.3, repeats=5,
                        time_ms=3.5, algbw_gbs=1.2, note="busbw = algbw x 1 (nccl-tests)"),
            BenchResult(section="loader", op="loader", size="workers=2", device="cpu", unit="samples/s",
                        median=12000.0, p10=11000.0, p90=12500.0, repeats=5, time_ms=5.3,
                        note="batch 64, 9 batches per window, pin_memory=False; first batch after 850 ms (worker start-up)"),
        ),
        skipped=(BenchSkip(section="all", what="GPU benchmarks", reason="no CUDA GPU visible: CPU figures only"),),
        duration_s=11.2,
    )


@pytest.fixture
def mk():
    """The builders above, for tests (importlib mode cannot import conftest by name)."""
    import types

    return types.SimpleNamespace(
        matmul=matmul, copy=copy, collective=collective, link=h200_link, GiB=GiB, MiB=MiB
    )
