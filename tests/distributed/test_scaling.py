"""``benchmarks/scaling.py --cpu --quick --world-sizes 1,2`` end to end: 2 gloo ranks on the CPU.

Every part runs through its real launch path (torchrun for the collectives and the training,
``gpudoctor run`` for the straggler) and its figures land in the JSON.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def scaling(tmp_path_factory) -> tuple[dict, subprocess.CompletedProcess]:
    out = tmp_path_factory.mktemp("scaling") / "scaling-cpu.json"
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT / "src"), env.get("PYTHONPATH", "")) if p)
    env["OMP_NUM_THREADS"] = "1"
    proc = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "scaling.py"), "--cpu", "--quick", "--world-sizes", "1,2",
         "--out", str(out)],
        env=env, capture_output=True, text=True, timeout=240, cwd=out.parent,
    )
    assert out.is_file(), proc.stdout[-2000:] + proc.stderr[-3000:]
    return json.loads(out.read_text()), proc


@pytest.mark.distributed
def test_the_run_records_its_command_and_devices(scaling) -> None:
    doc, proc = scaling
    assert proc.returncode in (0, 1), proc.stderr[-3000:]  # 1: a part did not pass (see its status)
    assert doc["command"][1:] == [str(ROOT / "benchmarks" / "scaling.py"), "--cpu", "--quick", "--world-sizes", "1,2",
                                  "--out", doc["command"][-1]]
    assert doc["device_kind"] == "CPU core" and doc["visible_devices"] == os.cpu_count()
    assert doc["world_sizes"] == [1, 2] and doc["world_sizes_run"] == [1, 2] and doc["skipped"] == []
    assert set(doc["parts"]) == {"collectives", "straggler", "training"}
    assert "1. all_reduce bus bandwidth (ok, 2 ranks)" in proc.stdout and "3. training throughput" in proc.stdout


@pytest.mark.distributed
def test_collectives_part_has_busbw_per_size(scaling) -> None:
    coll = scaling[0]["parts"]["collectives"]
    assert coll["status"] == "ok" and coll["world_size"] == 2 and coll["op"] == "all_reduce"
    assert [r["size"] for r in coll["results"]] == ["1 MiB", "4 MiB"]  # the CPU quick sizes
    for r in coll["results"]:
        assert r["device"] == "2 x cpu (gloo)" and r["busbw_gbs"] > 0
        assert r["busbw_gbs"] == pytest.approx(r["algbw_gbs"] * 2 * (2 - 1) / 2, rel=1e-6)  # nccl-tests factor


@pytest.mark.distributed
def test_training_part_has_every_throughput_and_efficiency(scaling) -> None:
    tr = scaling[0]["parts"]["training"]
    assert tr["status"] == "ok", tr
    rows = {(r["model"], r["strategy"], r["world_size"]): r for r in tr["results"]}
    assert set(rows) == {(m, s, n) for m in ("gpt", "resnet") for s, n in (("none", 1), ("ddp", 2), ("fsdp", 2))}
    for (model, strategy, world), r in rows.items():
        assert r["status"] == "ok" and r["throughput"] > 0 and r["timed_steps"] >= 2
        assert r["unit"] == ("tok/s" if model == "gpt" else "img/s")
        assert r["command"][:5] == [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node"]
        assert r["command"][5] == str(world)
    effs = {(e["model"], e["strategy"]): e["efficiency"] for e in tr["efficiency"]}
    assert set(effs) == {(m, s) for m in ("gpt", "resnet") for s in ("ddp", "fsdp")}
    for (model, strategy), eff in effs.items():
        base = rows[(model, "none", 1)]["throughput"]
        assert eff == pytest.approx(rows[(model, strategy, 2)]["throughput"] / (2 * base))
    assert tr["goal"]["met"] is None and "not measured at 8 ranks" in tr["goal"]["why"]


@pytest.mark.distributed
def test_straggler_part_plants_the_last_rank_and_diagnose_names_it(scaling) -> None:
    st = scaling[0]["parts"]["straggler"]
    assert st["planted_rank"] == 1 and st["world_size"] == 2 and st["rc"] == 0
    assert st["command"][-2:] == ["--straggler-rank", "1"]
    # the run's profiler windows show it: the rank the others wait for waits least in collectives
    assert st["least_waiting_rank"] == 1
    waits = {int(r): ms for r, ms in st["comm_wait_ms_per_step"].items()}
    assert waits[0] > waits[1]
    # diagnose names it from the same signal: the gloo collective time in the profiler windows
    assert st["named_rank"] == 1 and st["ok"] is True and st["status"] == "ok", st
    assert st["straggler_finding"]["evidence"][0].startswith("gloo wait per step: rank 0: ")
