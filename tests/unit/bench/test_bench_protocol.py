"""The shared timing protocol and the small pure helpers of the benchmarks."""

from __future__ import annotations

import pytest

from gpudoctor.bench.collectives import attach_peak, bus_factor, link_peak
from gpudoctor.bench.copy import size_label
from gpudoctor.bench.links import nccl_env, nvlink_gbs, pcie_gbs
from gpudoctor.bench.protocol import Protocol, spread, throughput, time_host
from gpudoctor.bench.suite import BenchOptions, parse_sizes
from gpudoctor.errors import GpuDoctorUserError
from gpudoctor.records.bench import LinkState


def test_spread_median_and_deciles() -> None:
    s = spread([float(v) for v in range(1, 12)])  # 1..11
    assert (s.median, s.p10, s.p90, s.count) == (6.0, 2.0, 10.0, 11)
    assert spread([3.0]).p10 == spread([3.0]).p90 == 3.0
    with pytest.raises(ValueError, match="no samples"):
        spread([])


def test_throughput_inverts_time_so_p10_is_the_slow_end() -> None:
    s = throughput(1e9, [1000.0, 500.0, 250.0], scale=1e9)  # 1 GB in 1, 0.5, 0.25 s
    assert s.median == pytest.approx(2.0)
    assert s.p10 < s.median < s.p90


def test_protocol_validates() -> None:
    with pytest.raises(ValueError, match="repeats=0 must be at least 1"):
        Protocol(repeats=0)
    with pytest.raises(ValueError, match="warmup=-1"):
        Protocol(warmup=-1)


def test_time_host_runs_warmup_plus_repeats_times_inner() -> None:
    calls = []
    times = time_host(lambda: calls.append(1), Protocol(warmup=2, repeats=3, inner=4))
    assert len(times) == 3 and len(calls) == 2 + 3 * 4


@pytest.mark.parametrize("op,n,factor", [
    ("all_reduce", 2, 1.0), ("all_reduce", 8, 1.75), ("all_gather", 2, 0.5),
    ("reduce_scatter", 8, 0.875), ("all_reduce", 1, 0.0),
])
def test_bus_factor_is_nccl_tests(op, n, factor) -> None:
    assert bus_factor(op, n) == pytest.approx(factor)


def test_bus_factor_rejects_unknown() -> None:
    with pytest.raises(ValueError, match="broadcast"):
        bus_factor("broadcast", 2)


def test_link_rates() -> None:
    assert pcie_gbs(5, 16) == pytest.approx(63.0, rel=1e-3)
    assert pcie_gbs(4, 16) == pytest.approx(31.5, rel=1e-3)
    assert pcie_gbs(None, 16) is None and pcie_gbs(9, 16) is None
    assert nvlink_gbs(18, (9, 0)) == 450.0  # H100/H200
    assert nvlink_gbs(12, (8, 0)) == 300.0  # A100
    assert nvlink_gbs(18, (10, 0)) == 900.0  # B200
    assert nvlink_gbs(0, (9, 0)) is None


def test_link_peak_prefers_nvlink_then_pcie() -> None:
    nv = LinkState(index=0, nvlink_active_links=18, pcie_gen_max=5, pcie_width_max=16, p2p_peers=(1,))
    assert link_peak((nv,), (9, 0)) == (450.0, "NVLink, 18 active links, one direction")
    pcie = LinkState(index=0, nvlink_active_links=0, pcie_gen_max=4, pcie_width_max=16, p2p_peers=())
    peak, source = link_peak((pcie,), (8, 9))
    assert peak == pytest.approx(31.5, rel=1e-3) and "through host memory (no P2P)" in source
    assert link_peak((), (9, 0)) == (None, "")


def test_attach_peak_only_to_gpu_results(mk) -> None:
    gpu = mk.collective("all_reduce", mk.GiB, 328.0, 1.0, peak=None)
    from dataclasses import replace

    cpu = replace(gpu, device="2 x cpu (gloo)")
    out = attach_peak([gpu, cpu], 450.0, "NVLink")
    assert out[0].fraction_of_peak == pytest.approx(328 / 450) and out[1].peak is None


def test_size_label() -> None:
    assert [size_label(1 << 30), size_label(256 << 20), size_label(1536), size_label(1000)] == [
        "1 GiB", "256 MiB", "1536 B", "1000 B"]


def test_parse_sizes_splits_matmul_from_bytes() -> None:
    assert parse_sizes("4096, 8192,1M,256MiB,1G,2GB") == (
        (4096, 8192), (1 << 20, 256 << 20, 1 << 30, 2 * 10**9))
    assert parse_sizes("") == ((), ())
    with pytest.raises(GpuDoctorUserError, match="bare number"):
        parse_sizes("1Q")
    with pytest.raises(GpuDoctorUserError, match="must be positive"):
        parse_sizes("0")


def test_options_validate() -> None:
    with pytest.raises(ValueError, match="choose one of matmul, copy, collectives, loader or all"):
        BenchOptions(what="disk")
    with pytest.raises(ValueError, match="bf61 unknown"):
        BenchOptions(dtypes=("bf61",))
    with pytest.raises(ValueError, match="at least 2 processes"):
        BenchOptions(nproc=1)


def test_nccl_env_picks_nccl_and_visible_devices() -> None:
    env = {"NCCL_P2P_DISABLE": "1", "CUDA_VISIBLE_DEVICES": "0,1", "HOME": "/root"}
    assert nccl_env(env) == {"CUDA_VISIBLE_DEVICES": "0,1", "NCCL_P2P_DISABLE": "1"}
