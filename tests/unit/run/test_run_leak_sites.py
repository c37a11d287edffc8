"""Plain ``gpudoctor run`` names a leak's allocation sites (issue 22): once the allocated bytes
after the step boundary grew on each of the last steps past warm-up, the probes record
allocation history for a few steps and write ``leak-sites-rank0.json``; ``diagnose`` puts the
sites into the leak finding.

The CPU allocator keeps no statistics, so the scripts here stand in for CUDA's (the memory run
tests do the same, tests/unit/memory/test_memory_run_cli.py): the boundary's allocator read
returns the script's own byte count, and the snapshot lists the script's own blocks, each with
the frame that made it while history is on. Everything else is the real launcher, the real
probes and the real analysis.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from cli_runner import gpudoctor

from gpudoctor.collectors.instrument import leak_probe
from gpudoctor.records.rundir import load_run

MIB = 1 << 20

# argv[1]: "leak" (1 MiB kept every step), "steady" (nothing kept), "die" (leaks, then raises
# one step after the history was turned on: step 9 ran with it). argv[2] (optional): seconds each step sleeps while the history is on
# (recording stacks makes those steps slower), the first of them 8 times as long: a slow step
# that stands out that far would otherwise be taken for a one-off start-up cost. The history switch is logged to history.log.
SCRIPT = """
import sys
import time
import torch
from torch import nn
from gpudoctor.collectors.instrument import leak_probe, probes
from gpudoctor.core.memory import AllocatorStats
from gpudoctor.records.base import to_dict

MODE = sys.argv[1]
SLOW = float(sys.argv[2]) if len(sys.argv) > 2 else 0.0
BASE = 0.005 if SLOW else 0.0  # with SLOW, every step takes 5 ms: sub-ms steps read scheduler noise as stalls
blocks = [(8 * 1024 * 1024, [])]  # the weights, made before any history: no frames
history = {"on": False}
log = open("history.log", "w")


def set_history(on):
    history["on"] = on
    log.write(("on" if on else "off") + "\\n")
    log.flush()


class Memory:
    @staticmethod
    def _snapshot():
        return {"segments": [{"device": 0, "total_size": 1 << 30, "stream": 0, "blocks": [
            {"size": size, "state": "active_allocated", "frames": frames} for size, frames in blocks]}]}


class Cuda:
    memory = Memory()

    @staticmethod
    def current_device():
        return 0


class FakeTorch:
    cuda = Cuda()


def gpu_boundary(step, fields, waiting):  # the boundary's allocator read, from our own count
    allocated = sum(size for size, _ in blocks)
    fields["mem"] = to_dict(AllocatorStats(allocated_bytes=allocated, reserved_bytes=1 << 30,
                                           peak_allocated_bytes=allocated, peak_reserved_bytes=1 << 30))


probes._gpu_boundary = gpu_boundary
leak_probe._cuda = lambda: FakeTorch
leak_probe._history_on = lambda: history["on"]
leak_probe._set_history = set_history


def remember():
    frame = sys._getframe()
    frames = [{"filename": __file__, "line": frame.f_lineno, "name": "remember"}] if history["on"] else []
    blocks.append((1024 * 1024, frames))  # the planted leak: 1 MiB kept every step


model = nn.Linear(4, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
x = torch.randn(8, 4)
seen_on = 0
for step in range(100):
    loss = model(x).square().mean()
    seen_on = seen_on + 1 if history["on"] else 0  # steps run with the history on
    if MODE != "steady":
        remember()
    if history["on"] and SLOW:
        time.sleep(SLOW * (8 if seen_on == 1 else 1))
    time.sleep(BASE)
    opt.zero_grad()
    loss.backward()
    opt.step()
    if MODE == "die" and seen_on == 1 and history["on"]:
        raise RuntimeError("the script dies while the history is on")
"""


def _run(tmp_path: Path, mode: str, *args: str, steps: int = 20, slow: float = 0.0) -> dict:
    (tmp_path / "train.py").write_text(SCRIPT, encoding="utf-8")
    result = gpudoctor("run", "--steps", str(steps), "--json", "--fail-on", "never", "--out", "rd", *args,
                       "--", sys.executable, "train.py", mode, str(slow), cwd=tmp_path, timeout=120)
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout)


def test_a_leak_seen_during_run_gets_its_sites_recorded_and_named_by_diagnose(tmp_path: Path) -> None:
    payload = _run(tmp_path, "leak")
    # history on once, off once: on at boundary 8 (3 growths of >= 256 KiB past warm-up: steps 6-8)
    assert (tmp_path / "history.log").read_text() == "on\noff\n"
    run = load_run(tmp_path / "rd")
    sites = run.leak_sites[0]
    assert (sites.step_from, sites.step_to) == (9, 13)  # the base one step after, then 4 steps
    assert sites.history_steps == (9, 13)  # on after boundary 8, off after boundary 13
    (top,) = sites.sites  # the weights (no frames) did not grow: only the planted site
    assert "train.py:" in top.site and top.site.endswith(" remember"), top.site
    assert top.bytes_to - top.bytes_from == 4 * MIB and top.blocks_to - top.blocks_from == 4
    # the profiler window (steps 15-19 of --steps 20) is untouched by the history (off at 13)
    assert tuple(run.manifest.profile_window) == (15, 19)

    leak = next(f for f in payload["findings"] if f["code"] == "GD-RUN-MEM-LEAK")
    assert "remember" in leak["title"]
    assert "allocation sites that grew (allocation history, no OOM needed):" in leak["evidence"]
    assert any("remember" in line and "1.0 MiB per step" in line for line in leak["evidence"]), leak["evidence"]

    shown = gpudoctor("diagnose", "rd", "--json", "--fail-on", "never", cwd=tmp_path)
    assert shown.returncode == 0, shown.stderr[-3000:]
    again = next(f for f in json.loads(shown.stdout)["findings"] if f["code"] == "GD-RUN-MEM-LEAK")
    assert again["title"] == leak["title"] and again["evidence"] == leak["evidence"]


def test_a_steady_run_records_no_history_and_writes_no_sites(tmp_path: Path) -> None:
    payload = _run(tmp_path, "steady")
    assert (tmp_path / "history.log").read_text() == ""
    assert not (tmp_path / "rd" / "leak-sites-rank0.json").exists()
    assert "GD-RUN-MEM-LEAK" not in {f["code"] for f in payload["findings"]}


def test_the_history_is_stopped_when_the_script_dies_while_it_is_on(tmp_path: Path) -> None:
    (tmp_path / "train.py").write_text(SCRIPT, encoding="utf-8")
    result = gpudoctor("run", "--steps", "20", "--json", "--fail-on", "never", "--out", "rd",
                       "--", sys.executable, "train.py", "die", cwd=tmp_path, timeout=120)
    assert "the script dies while the history is on" in result.stderr
    assert (tmp_path / "history.log").read_text() == "on\noff\n"  # atexit turned it off
    # step 9 ran with the history on (its boundary took the base), then the script died: no
    # sites, but the record still says which step the statistics must leave out
    sites = load_run(tmp_path / "rd").leak_sites[0]
    assert (sites.step_from, sites.step_to, sites.sites, sites.history_steps) == (9, -1, (), (9, 9))


def test_the_steps_run_with_history_on_are_left_out_of_the_steady_figures(tmp_path: Path) -> None:
    """Recording stacks slows the steps the history is on in (here 40 ms more each, the first 320 ms,
    against a 5 ms step): they are left out of every figure, and read as no
    stall, no one-off step and no slow-down; the view says so. Counted in, the first of them was
    a one-off step (printed "one-time: step 9") and the mean step over 10x the median."""
    payload = _run(tmp_path, "leak", steps=60, slow=0.04)
    run = load_run(tmp_path / "rd")
    assert run.leak_sites[0].history_steps == (9, 13)
    records = {s.step: s.step_ms for s in run.steps[0]}
    assert min(records[s] for s in range(9, 14)) >= 40.0  # the fake made them slow

    (stats,) = payload["stats"]
    assert stats["history_steps"] == [9, 10, 11, 12, 13]
    # 60 steps: warm-up 0-5 and the profiler window 55-59 out, then the 5 recorded ones; a step a
    # loaded machine happened to stall may be left out as a one-off, never one of the recorded ones
    one_off = stats["one_off_steps"]
    assert not set(one_off) & set(range(9, 14)), one_off
    assert stats["steps"] == 60 - 6 - 5 - 5 - len(one_off)
    assert stats["mean_step_ms"] < 10.0  # no 40 ms step in the mean (5 ms steps, CPU noise ~1 ms)
    assert "5 steps (9-13) ran with allocation history on" in stats["history"]
    codes = {f["code"] for f in payload["findings"]}
    assert "GD-RUN-MEM-LEAK" in codes
    assert not codes & {"GD-RUN-PERIODIC-STALL", "GD-RUN-SLOWDOWN", "GD-RUN-STALL"}, codes

    shown = gpudoctor("diagnose", "rd", "--fail-on", "never", cwd=tmp_path)
    assert shown.returncode == 0, shown.stderr[-3000:]
    assert "steps after warm-up (44/60)" in shown.stdout
    assert "rank 0: 5 steps (9-13) ran with allocation history on" in shown.stdout
    assert "one-time" not in shown.stdout


# ---- the online check alone, in this process -------------------------------------------------


class _Recorder:
    def __init__(self) -> None:
        self.calls: list[bool] = []
        self.snapshots = 0


@pytest.fixture
def watch(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> _Recorder:
    from gpudoctor.collectors.instrument.state import S

    rec = _Recorder()
    monkeypatch.setattr(leak_probe, "W", leak_probe._Watch())
    monkeypatch.setattr(leak_probe, "_cuda", lambda: object())
    monkeypatch.setattr(leak_probe, "_history_on", lambda: bool(rec.calls) and rec.calls[-1])
    monkeypatch.setattr(leak_probe, "_set_history", rec.calls.append)
    monkeypatch.setattr(leak_probe.atexit, "register", lambda fn: None)

    def live_sites(torch: object) -> dict:
        rec.snapshots += 1
        return {"train.py:9 f": (rec.snapshots * MIB, rec.snapshots)}

    monkeypatch.setattr(leak_probe, "live_sites", live_sites)
    monkeypatch.setattr(S, "run_dir", tmp_path)
    return rec


def _steps(n: int, grow_from: int = 0, start: int = 0) -> None:
    for step in range(start, start + n):
        leak_probe.watch(step, {"allocated_bytes": 10 * MIB + max(step - grow_from, 0) * MIB})


def test_the_check_waits_for_the_profiler_window_to_end_then_records_once(watch: _Recorder) -> None:
    leak_probe.arm((10, 14), None)  # --full's window: a leak seen at step 8 would run into it
    _steps(40)
    assert watch.calls == [True, False] and watch.snapshots == 2
    assert leak_probe.W.started == 14  # the boundary that stopped the window
    _steps(40, start=40)  # never twice
    assert watch.calls == [True, False]


def test_the_check_never_starts_what_would_outlast_steps(watch: _Recorder) -> None:
    leak_probe.arm(None, 13)  # boundary 8 + 1 + 4 = 13 is past the last step (12)
    _steps(13)
    assert watch.calls == [] and watch.snapshots == 0


def test_no_allocator_counters_no_check(watch: _Recorder) -> None:
    leak_probe.arm(None, None)
    for step in range(50):
        leak_probe.watch(step, None)  # a CPU-only run: the boundary read no allocator
    assert watch.calls == [] and leak_probe.W.started == -1


def test_growth_inside_warm_up_or_below_the_leak_rate_does_not_count(watch: _Recorder) -> None:
    leak_probe.arm(None, None)
    for step in range(6):  # 64 MiB a step during warm-up (steps 0-5)
        leak_probe.watch(step, {"allocated_bytes": step * 64 * MIB})
    for step in range(6, 40):  # then 128 KiB a step: below leak_min_bytes_per_step (256 KiB)
        leak_probe.watch(step, {"allocated_bytes": 320 * MIB + (step - 5) * 128 * 1024})
    assert watch.calls == []


def test_kept_tensors_that_change_size_with_the_batch_do_not_count_as_a_leak(watch: _Recorder) -> None:
    """Variable-length batches: the bytes kept across a step (the last output, the hidden state)
    climb for three steps and fall back, again and again; each climb is 1 MiB a step, over the
    leak rate, but never past the loop's own high, so no history is recorded."""
    leak_probe.arm(None, None)
    pattern = [0, 1, 2, 3, 1, 0, 1, 2, 3, 2]  # three rises in a row, every cycle
    for step in range(60):
        leak_probe.watch(step, {"allocated_bytes": 100 * MIB + pattern[step % len(pattern)] * MIB})
    assert watch.calls == [] and leak_probe.W.started == -1


def test_a_script_recording_its_own_history_keeps_it_on(watch: _Recorder, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(leak_probe, "_history_on", lambda: True)
    leak_probe.arm(None, None)
    _steps(20)
    assert watch.calls == [] and watch.snapshots == 2  # sites taken, history left as it was


RECORDED = Path(__file__).resolve().parents[2] / "fixtures"


@pytest.mark.parametrize("run_dir", sorted(p.parent for p in [*RECORDED.glob("runs/*/steps-rank0.jsonl"),
                                                             *RECORDED.glob("runs_corpus/*/steps-rank0.jsonl")]),
                         ids=lambda p: f"{p.parent.name}/{p.name}")
def test_on_recorded_gpu_runs_only_the_planted_leak_starts_the_recording(watch: _Recorder, run_dir: Path) -> None:
    """The watch replayed over every recorded run's boundaries (the allocator counters its step
    records carry): the H200 recording of the planted leak starts the recording, and neither the
    other planted workloads nor the public corpus scripts (dcgan's allocated bytes move 122-168 MiB,
    super_resolution's 5.5-35 MiB) do."""
    leak_probe.arm(None, None)
    for line in (run_dir / "steps-rank0.jsonl").read_text(encoding="utf-8").splitlines()[1:]:
        record = json.loads(line)
        if record.get("mem") and record["mem"].get("allocated_bytes") is not None:
            leak_probe.watch(record["step"], record["mem"])
    assert (leak_probe.W.started >= 0) == (run_dir.name == "leaky_loss"), leak_probe.W.started
