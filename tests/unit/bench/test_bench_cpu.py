"""The CPU paths of the benchmarks, measured for real at tiny sizes."""

from __future__ import annotations

import torch

from gpudoctor.bench.copy import run_copy
from gpudoctor.bench.matmul import run_matmul


def test_cpu_matmul_fp32_and_bf16_skips_gpu_dtypes() -> None:
    results, skipped, probe = run_matmul(torch.device("cpu"), dtypes=("fp32", "bf16", "tf32", "fp8"), sizes=(64,))
    assert [(r.dtype, r.unit, r.size) for r in results] == [("fp32", "GFLOP/s", "64x64x64"), ("bf16", "GFLOP/s", "64x64x64")]
    assert all(r.median > 0 and r.peak is None and r.repeats == 5 for r in results)
    assert [s.what for s in skipped] == ["tf32", "fp8"]
    assert "tensor-core formats need a GPU" in skipped[0].reason
    assert probe is None


def test_cpu_matmul_restores_fp32_precision() -> None:
    before = torch.get_float32_matmul_precision()
    run_matmul(torch.device("cpu"), dtypes=("fp32",), sizes=(32,))
    assert torch.get_float32_matmul_precision() == before


def test_host_memcpy_counts_read_and_write() -> None:
    results, link = run_copy(torch.device("cpu"), sizes=(1 << 20,))
    (r,) = results
    assert r.op == "host_memcpy" and r.size == "1 MiB" and r.size_bytes == 2 << 20
    assert "read + written" in r.note and r.median > 0 and link is None
