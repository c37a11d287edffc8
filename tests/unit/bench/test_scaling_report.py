"""``benchmarks/scaling.py`` without launching anything: efficiency, the goal, skips and the table."""

from __future__ import annotations

import importlib.util
import json
import sys
import time
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[3] / "benchmarks" / "scaling.py"


@pytest.fixture(scope="module")
def scaling():
    spec = importlib.util.spec_from_file_location("scaling_bench", BENCH)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _row(model: str, strategy: str, world: int, throughput: float | None) -> dict:
    if throughput is None:
        return {"model": model, "strategy": strategy, "world_size": world, "status": "failed",
                "error": "launch exit 124: timed out after 240 s"}
    return {"model": model, "strategy": strategy, "world_size": world, "status": "ok",
            "throughput": throughput, "unit": "tok/s" if model == "gpt" else "img/s"}


ROWS = [_row("gpt", "none", 1, 100.0), _row("resnet", "none", 1, 50.0),
        _row("gpt", "ddp", 8, 740.0), _row("resnet", "ddp", 8, 380.0),
        _row("gpt", "fsdp", 8, 700.0), _row("resnet", "fsdp", 8, None)]


def test_efficiency_is_throughput_over_n_times_the_single_rank(scaling) -> None:
    effs = {(e["model"], e["strategy"], e["world_size"]): e["efficiency"] for e in scaling.efficiencies(ROWS)}
    assert effs == {("gpt", "ddp", 8): pytest.approx(0.925), ("resnet", "ddp", 8): pytest.approx(0.95),
                    ("gpt", "fsdp", 8): pytest.approx(0.875)}  # the failed row has none


def test_goal_is_judged_per_strategy_at_8_ranks(scaling) -> None:
    g = scaling.goal(scaling.efficiencies(ROWS))
    assert g["met"] == {"ddp": True, "fsdp": False}
    assert scaling.goal(scaling.efficiencies(ROWS[:2]))["met"] is None


def test_straggler_rank_is_5_at_8_ranks_else_the_last(scaling) -> None:
    assert [scaling.straggler_rank(n) for n in (2, 4, 8, 16)] == [1, 3, 5, 15]


def test_world_sizes_above_the_visible_count_are_skipped_with_the_reason(scaling, tmp_path, capsys) -> None:
    out = tmp_path / "s.json"
    assert scaling.main(["--cpu", "--world-sizes", "100000", "--out", str(out)]) == 1  # nothing ran
    doc = json.loads(out.read_text())
    assert doc["world_sizes_run"] == [] and doc["parts"] == {}
    reason = f"only {doc['visible_devices']} CPU core(s) visible"
    assert doc["skipped"] == [{"what": "world size 100000", "reason": reason}]
    assert "skipped: world size 100000" in capsys.readouterr().out


def test_bad_world_sizes_are_a_usage_error(scaling, tmp_path) -> None:
    with pytest.raises(SystemExit) as exc:
        scaling.main(["--world-sizes", "two", "--out", str(tmp_path / "s.json")])
    assert exc.value.code == 2


def test_table(scaling, golden) -> None:
    doc = {
        "visible_devices": 8, "device_kind": "GPU", "world_sizes": [1, 8, 16],
        "skipped": [{"what": "world size 16", "reason": "only 8 GPU(s) visible"}],
        "parts": {
            "collectives": {"status": "ok", "world_size": 8, "reference": scaling.REFERENCE_BUSBW, "results": [
                {"size": "1 MiB", "busbw_gbs": 40.5, "busbw_p10": 38.0, "busbw_p90": 41.25, "time_ms": 0.045},
                {"size": "4 GiB", "busbw_gbs": 470.0, "busbw_p10": 465.5, "busbw_p90": 471.0, "time_ms": 16.0}]},
            "straggler": {"status": "ok", "planted_rank": 5, "world_size": 8, "named_rank": 5,
                          "least_waiting_rank": 5},
            "training": {"status": "partial", "results": [{**r, "model_desc": None} for r in ROWS],
                         "efficiency": scaling.efficiencies(ROWS), "goal": scaling.goal(scaling.efficiencies(ROWS)),
                         "skipped": [{"what": "training at 16 rank(s)", "reason": "time budget (--budget-s) used up"}]},
        },
    }
    golden("bench/scaling_table.txt", scaling.render(doc))


def test_a_crashing_part_is_recorded_and_does_not_raise(scaling) -> None:
    doc = {"parts": {}}
    scaling.run_part("collectives", lambda: 1 / 0, doc)
    part = doc["parts"]["collectives"]
    assert part["status"] == "failed" and part["error"].startswith("ZeroDivisionError")
    assert "wall_s" in part


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/status").read_text()
    except FileNotFoundError:
        return False
    return "\nState:\tZ" not in state  # a zombie has exited


@pytest.mark.skipif(not Path("/proc").is_dir(), reason="reads /proc")
def test_a_timed_out_launch_is_killed_with_its_children(scaling, tmp_path) -> None:
    pid_file = tmp_path / "child.pid"
    parent = ("import subprocess, sys, time\n"
              "c = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(120)'])\n"
              f"open({str(pid_file)!r}, 'w').write(str(c.pid))\n"
              "time.sleep(120)\n")
    rc, err = scaling._run([sys.executable, "-c", parent], timeout_s=3.0)
    assert rc == 124 and err == "timed out after 3 s"
    child = int(pid_file.read_text())
    for _ in range(40):  # SIGKILL is delivered asynchronously: give the kernel a moment
        if not _alive(child):
            break
        time.sleep(0.05)
    assert not _alive(child)  # the launch's whole process group went, not only its first process
