"""GPU peak throughput and bandwidth, from ``data/gpu_specs.toml`` (knowledge as data: records
holds the loader so the pure analysis can quote peaks; standard library only).

Matches ``torch.cuda.get_device_name()`` strings ("NVIDIA H200", "NVIDIA A100-SXM4-80GB",
"NVIDIA H100 80GB HBM3", ...) to a datasheet row. Unknown GPUs give ``None``: MFU is then not
reported rather than reported against a guess.
"""

from __future__ import annotations

import re
from functools import lru_cache
from importlib import resources

from gpudoctor.records.base import record

import tomllib

DTYPES = ("fp32", "tf32", "bf16", "fp16", "fp8")


@record
class GpuSpec:
    """One datasheet row. Throughputs are dense TFLOP/s; ``None`` where the GPU has no such path."""

    key: str
    name: str
    match: tuple[str, ...]
    mem_bandwidth_gbs: float
    source: str
    fp32: float | None = None
    tf32: float | None = None
    bf16: float | None = None
    fp16: float | None = None
    fp8: float | None = None
    pcie_gen: int | None = None  # the host link, x16

    def peak_tflops(self, dtype: str) -> float | None:
        if dtype not in DTYPES:
            raise ValueError(f"dtype {dtype!r} is not one of {', '.join(DTYPES)}")
        return getattr(self, dtype)


@lru_cache(maxsize=1)
def load_specs() -> tuple[GpuSpec, ...]:
    """All rows of the spec table, in match order."""
    text = resources.files("gpudoctor.data").joinpath("gpu_specs.toml").read_text("utf-8")
    rows = tomllib.loads(text)["gpu"]
    return tuple(GpuSpec(**{**row, "match": tuple(row["match"])}) for row in rows)


# Usable bandwidth of one PCIe lane, one direction, GB/s, after line encoding
# (8b/10b up to Gen2, 128b/130b for Gen3-5, 242B/256B FLIT for Gen6).
PCIE_LANE_GBS = {1: 0.25, 2: 0.5, 3: 0.985, 4: 1.969, 5: 3.938, 6: 7.563}


def pcie_gbs(gen: int | None, width: int | None) -> float | None:
    """Line rate of a PCIe link in GB/s per direction, or ``None`` when gen/width are unknown."""
    if not gen or not width or gen not in PCIE_LANE_GBS:
        return None
    return PCIE_LANE_GBS[gen] * width


def match_spec(device_name: str) -> GpuSpec | None:
    """The first row whose pattern matches ``device_name``; ``None`` for an unknown GPU."""
    for spec in load_specs():
        if any(re.search(p, device_name, re.IGNORECASE) for p in spec.match):
            return spec
    return None


def peak_flops(device_name: str, dtype: str) -> float | None:
    """Peak dense FLOP/s (not TFLOP/s) of ``device_name`` in ``dtype``, or ``None``."""
    spec = match_spec(device_name)
    if spec is None:
        return None
    tflops = spec.peak_tflops(dtype)
    return None if tflops is None else tflops * 1e12
