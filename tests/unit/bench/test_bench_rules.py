"""The normal/low judgement of benchmark figures (pure rules)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from gpudoctor.analysis.bench_rules import BenchThresholds, judge, judge_result
from gpudoctor.records.bench import BenchVerdict



def test_design_md_figures_are_normal(gpu_report, mk) -> None:
    judged = {(r.op, r.dtype, r.size): r for r in judge(gpu_report).results}
    for key in [("matmul", "bf16", "8192x8192x8192"), ("matmul", "tf32", "8192x8192x8192"),
                ("matmul", "fp32", "8192x8192x8192"), ("h2d_pinned", "", "256 MiB"),
                ("d2d", "", "2048 MiB"), ("all_reduce", "fp32", "1 GiB")]:
        assert judged[key].verdict is BenchVerdict.NORMAL, key


def test_low_matmul_without_evidence_gives_the_usual_causes(mk) -> None:
    r = judge_result(mk.matmul("fp16", 350.0, 989.4), links=(mk.link(),))
    assert r.verdict is BenchVerdict.LOW
    assert "35% of the reference, under 60%" in r.note
    assert "power cap" in r.note and "throttling" in r.note


def test_low_matmul_is_explained_by_the_power_cap_and_throttling_seen(mk) -> None:
    link = mk.link(power_limit_w=400.0, throttle_reasons=("sw_power_cap",), sm_clock_mhz=1200)
    r = judge_result(mk.matmul("bf16", 450.0, 989.4), links=(link,))
    assert r.verdict is BenchVerdict.LOW
    assert "power capped at 400 W of the default 700 W" in r.note
    assert "clocks held back under load: sw_power_cap" in r.note
    assert "SM clock 1200 of max 1980 MHz" in r.note
    assert "MIG" not in r.note  # evidence replaces the generic list


def test_fp8_has_its_own_limit(mk) -> None:
    assert judge_result(mk.matmul("fp8", 1000.0, 1978.9)).verdict is BenchVerdict.NORMAL  # 51% > 40%
    assert judge_result(mk.matmul("fp8", 700.0, 1978.9)).verdict is BenchVerdict.LOW


def test_above_the_reference_is_flagged_high(mk) -> None:
    r = judge_result(mk.matmul("bf16", 1200.0, 989.4))
    assert r.verdict is BenchVerdict.HIGH
    assert "may not match this machine" in r.note


def test_unknown_gpu_or_cpu_is_unjudged(mk) -> None:
    assert judge_result(mk.matmul("bf16", 100.0, None)).verdict is BenchVerdict.UNJUDGED
    pageable = judge_result(mk.copy("h2d_pageable", 21.4, None))
    assert pageable.verdict is BenchVerdict.UNJUDGED


def test_low_h2d_names_the_down_trained_link(mk) -> None:
    link = mk.link(pcie_gen_current=3, pcie_width_current=8)
    r = judge_result(mk.copy("h2d_pinned", 7.0, 63.0), links=(link,))
    assert r.verdict is BenchVerdict.LOW
    assert "trained down to Gen3 (max Gen5)" in r.note
    assert "runs x8 of x16" in r.note


def test_narrow_slot_is_named(mk) -> None:
    link = mk.link(pcie_width_current=8, pcie_width_max=8)
    r = judge_result(mk.copy("h2d_pinned", 10.0, 31.5), links=(link,))
    assert r.verdict is BenchVerdict.LOW and "the slot gives only x8 lanes" in r.note


def test_small_collectives_are_not_judged(mk) -> None:
    r = judge_result(mk.collective("all_reduce", 64 * mk.MiB, 5.0, 1.0))
    assert r.verdict is BenchVerdict.UNJUDGED
    assert "latency-bound size: judged from 256 MiB up" in r.note


def test_gloo_collectives_are_a_sanity_check_only(mk) -> None:
    r = replace(mk.collective("all_reduce", mk.GiB, 1.0, 1.0, peak=None), device="2 x cpu (gloo)")
    r = judge_result(r)
    assert r.verdict is BenchVerdict.UNJUDGED and "CPU (gloo)" in r.note


def test_low_collective_names_p2p_off_and_nccl_env(mk) -> None:
    link = mk.link(nvlink_active_links=0, p2p_peers=())
    r = judge_result(
        mk.collective("all_reduce", mk.GiB, 10.0, 1.0, peak=63.0), links=(link,),
        nccl_env={"NCCL_P2P_DISABLE": "1", "NCCL_ALGO": "Tree", "NCCL_NVLS_ENABLE": "0"},
    )
    assert r.verdict is BenchVerdict.LOW
    for text in ("no active NVLink", "P2P access between the GPUs is off", "NCCL_P2P_DISABLE=1 is set",
                 "NCCL_ALGO=Tree forces NCCL's choice"):
        assert text in r.note
    assert "NCCL_NVLS_ENABLE" not in r.note


def test_thresholds_are_validated(mk) -> None:
    with pytest.raises(ValueError, match="matmul_low=1.5 must be a fraction"):
        BenchThresholds(matmul_low=1.5)
    with pytest.raises(ValueError, match="high=0.9 must be at least 1.0"):
        BenchThresholds(high=0.9)


def test_thresholds_move_the_verdict(mk) -> None:
    r = mk.matmul("bf16", 784.0, 989.4)
    assert judge_result(r, thresholds=BenchThresholds(matmul_low=0.85)).verdict is BenchVerdict.LOW
