"""``gpudoctor bench collectives --nproc 2``: the real torchrun launch path, 2 gloo ranks on CPU."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from gpudoctor.bench.collectives import bus_factor
from gpudoctor.cli.app import app


@pytest.mark.distributed
def test_two_gloo_ranks_measure_all_three_collectives(monkeypatch) -> None:
    monkeypatch.delenv("NCCL_NVLS_ENABLE", raising=False)
    result = CliRunner().invoke(app, ["bench", "collectives", "--nproc", "2", "--sizes", "64K,1M", "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    rows = [(r["op"], r["size"]) for r in data["results"]]
    assert rows == [(op, size) for op in ("all_reduce", "all_gather", "reduce_scatter") for size in ("64 KiB", "1 MiB")]
    for r in data["results"]:
        assert r["device"] == "2 x cpu (gloo)" and r["repeats"] == 5 and r["verdict"] == "unjudged"
        assert r["size_bytes"] in (64 << 10, 1 << 20)
        # busbw = algbw x the nccl-tests factor, and algbw = S / t with the median time
        assert r["algbw_gbs"] == pytest.approx(r["size_bytes"] / (r["time_ms"] / 1e3) / 1e9)
        assert r["p10"] <= r["median"] <= r["p90"]
        factor = bus_factor(r["op"], 2)
        assert r["median"] == pytest.approx(r["algbw_gbs"] * factor, rel=1e-6)  # 5 runs: the median is one run
    assert data["skipped"] == [{"section": "all", "what": "GPU benchmarks", "reason": "no CUDA GPU visible: CPU figures only"}]
