"""The GPU spec table: every row loads, has a source, and real device names match the right row."""

from __future__ import annotations

import re

import pytest

from gpudoctor.core.specs import DTYPES, load_specs, match_spec, peak_flops

# device names as torch.cuda.get_device_name() prints them
NAMES = {
    "NVIDIA H200": "H200-SXM",
    "NVIDIA H200 NVL": "H200-NVL",
    "NVIDIA H100 80GB HBM3": "H100-SXM",
    "NVIDIA H100 PCIe": "H100-PCIE",
    "NVIDIA H100 NVL": "H100-NVL",
    "NVIDIA A100-SXM4-40GB": "A100-40GB",
    "NVIDIA A100-SXM4-80GB": "A100-80GB",
    "NVIDIA A100 80GB PCIe": "A100-80GB-PCIE",
    "NVIDIA A100-PCIE-40GB": "A100-40GB",
    "NVIDIA L4": "L4",
    "NVIDIA L40S": "L40S",
    "NVIDIA A10": "A10",
    "Tesla T4": "T4",
    "Tesla V100-SXM2-16GB": "V100-SXM2",
    "Tesla V100-PCIE-32GB": "V100-PCIE",
    "NVIDIA GeForce RTX 3090": "RTX-3090",
    "NVIDIA GeForce RTX 4090": "RTX-4090",
    "NVIDIA GeForce RTX 5090": "RTX-5090",
    "NVIDIA B200": "B200",
}


@pytest.mark.parametrize("name,key", sorted(NAMES.items()))
def test_device_name_matches_row(name: str, key: str) -> None:
    spec = match_spec(name)
    assert spec is not None and spec.key == key


@pytest.mark.parametrize("spec", load_specs(), ids=lambda s: s.key)
def test_every_row_is_complete(spec) -> None:
    assert spec.source and spec.mem_bandwidth_gbs > 0
    assert spec.fp32 is not None and spec.fp32 > 0
    values = [spec.peak_tflops(d) for d in DTYPES if spec.peak_tflops(d) is not None]
    assert all(v > 0 for v in values)
    if spec.bf16 is not None:  # tensor cores beat plain fp32
        assert spec.bf16 > spec.fp32


def test_unknown_gpu_gives_none() -> None:
    assert match_spec("Some Future GPU 9000") is None
    assert peak_flops("Some Future GPU 9000", "bf16") is None


def test_peak_flops_units_and_missing_dtype() -> None:
    assert peak_flops("NVIDIA H200", "bf16") == pytest.approx(989.4e12)
    assert peak_flops("Tesla T4", "bf16") is None
    with pytest.raises(ValueError, match="not one of"):
        match_spec("NVIDIA H200").peak_tflops("int4")


def _cited_numbers(source: str) -> list[float]:
    """Every number the source cites, also ×1000 (PFLOPS → TFLOPS, TB/s → GB/s)."""
    numbers = [float(n) for n in re.findall(r"\d+(?:\.\d+)?", source.replace(",", ""))]
    return numbers + [n * 1000 for n in numbers]


@pytest.mark.parametrize("spec", load_specs(), ids=lambda s: s.key)
def test_every_figure_is_one_its_source_cites(spec) -> None:
    """Each value is a figure printed in the cited document, or half of a "with sparsity" one."""
    cited = _cited_numbers(spec.source)

    def printed(value: float) -> bool:
        return any(abs(c - value) <= 1e-3 * value or abs(c - 2 * value) <= 1e-3 * value
                   for c in cited)

    assert printed(spec.mem_bandwidth_gbs), (spec.key, "bandwidth", spec.mem_bandwidth_gbs)
    for dtype in DTYPES:
        value = spec.peak_tflops(dtype)
        assert value is None or printed(value), (spec.key, dtype, value)
    assert "NVIDIA" in spec.source and ("dense" in spec.source or "sparsity" in spec.source
                                        or "no bf16" in spec.source)
