"""``gpudoctor.watch`` runs ``run``'s online leak check (issue 22): once the allocated bytes after
the step boundary grew on each of the last steps past warm-up, the in-process probes record
allocation history for a few steps, write ``leak-sites-rank0.json``, the watch's leak finding
names the line, and the steps recorded with history are left out of the steady figures.

The CPU allocator keeps no statistics, so the fakes of ``gpudoctor run``'s own CPU test
(tests/unit/run/test_run_leak_sites.py) stand in for CUDA's, here in this process: the
boundary's allocator read returns the loop's own byte count, and the snapshot lists the loop's
own blocks, each with the frame that made it while history is on. Everything else is the real
watch, the real probes and the real analysis.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import pytest
import torch
from torch import nn

import gpudoctor
from gpudoctor.analysis.run_stats import run_stats
from gpudoctor.collectors.inprocess import wrappers_in_place
from gpudoctor.collectors.instrument import leak_probe, probes
from gpudoctor.core.memory import AllocatorStats
from gpudoctor.records.base import to_dict
from gpudoctor.records.rundir import load_run
from gpudoctor.watching import Watch

MIB = 1 << 20


class FakeCuda:
    """The allocator as the leak check sees it: blocks ``(size, frames)``, history on or off."""

    def __init__(self) -> None:
        self.blocks: list[tuple[int, list[dict]]] = [(8 * MIB, [])]  # the weights: no frames
        self.history = False
        self.switches: list[bool] = []
        self.cuda = self  # leak_probe reads torch.cuda.memory._snapshot, torch.cuda.current_device
        self.memory = self

    def _snapshot(self) -> dict:
        return {"segments": [{"device": 0, "total_size": 1 << 30, "stream": 0, "blocks": [
            {"size": size, "state": "active_allocated", "frames": frames} for size, frames in self.blocks]}]}

    @staticmethod
    def current_device() -> int:
        return 0

    def set_history(self, on: bool) -> None:
        self.history = on
        self.switches.append(on)

    def gpu_boundary(self, step: int, fields: dict, waiting: set) -> None:  # the boundary's read
        allocated = sum(size for size, _ in self.blocks)
        fields["mem"] = to_dict(AllocatorStats(allocated_bytes=allocated, reserved_bytes=1 << 30,
                                               peak_allocated_bytes=allocated, peak_reserved_bytes=1 << 30))


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch) -> FakeCuda:
    cuda = FakeCuda()
    monkeypatch.setattr(probes, "_gpu_boundary", cuda.gpu_boundary)
    monkeypatch.setattr(leak_probe, "_cuda", lambda: cuda)
    monkeypatch.setattr(leak_probe, "_history_on", lambda: cuda.history)
    monkeypatch.setattr(leak_probe, "_set_history", cuda.set_history)
    return cuda


def remember(cuda: FakeCuda) -> None:
    """The planted leak: 1 MiB kept every step, with this line as its frame while history is on."""
    frame = sys._getframe()
    frames = [{"filename": "train.py", "line": frame.f_lineno, "name": "remember"}] if cuda.history else []
    cuda.blocks.append((MIB, frames))


def train(cuda: FakeCuda, steps: int, *, leak: bool = True, slow: float = 0.0, die_at: int | None = None) -> None:
    """``slow``: seconds each step sleeps while history is on (the first of them 8x), over 20 ms
    steps (long enough that a busy 2-core machine's load drift stays under the 10% a slow-down
    needs: over 5 ms steps it once read as one, GD-RUN-SLOWDOWN, in CI); ``die_at``: raise in that
    step (counted from 0), after its optimizer step."""
    torch.manual_seed(0)
    model = nn.Linear(4, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    x = torch.randn(8, 4)
    seen_on = 0
    for step in range(steps):
        loss = model(x).square().mean()
        seen_on = seen_on + 1 if cuda.history else 0
        if leak:
            remember(cuda)
        if cuda.history and slow:
            time.sleep(slow * (8 if seen_on == 1 else 1))
        if slow:
            time.sleep(0.02)
        opt.zero_grad()
        loss.backward()
        opt.step()
        if step == die_at:
            raise RuntimeError("the loop dies while the history is on")


def _watch(tmp_path: Path, name: str, steps: int = 20, profile: bool = False) -> Watch:
    return gpudoctor.watch(steps=steps, run_dir=tmp_path / name, profile=profile, sample=False, quiet=True)


def test_a_leaking_loop_gets_its_sites_recorded_and_named_in_the_watch_findings(tmp_path: Path, fake: FakeCuda) -> None:
    with _watch(tmp_path, "leak", profile=True) as w:
        train(fake, 30)  # goes on past the 20 watched steps
    assert w.status == "stopped" and wrappers_in_place() == []
    # on at boundary 8 (3 growths of >= 256 KiB past warm-up: steps 6-8), off at boundary 13
    assert fake.switches == [True, False] and not fake.history
    run = load_run(w.run_dir)
    sites = run.leak_sites[0]
    assert (sites.step_from, sites.step_to, sites.history_steps) == (9, 13, (9, 13))
    (top,) = sites.sites  # the weights (no frames) did not grow: only the planted site
    assert top.site.startswith("train.py:") and top.site.endswith(" remember"), top.site
    assert top.bytes_to - top.bytes_from == 4 * MIB and top.blocks_to - top.blocks_from == 4
    assert tuple(run.manifest.profile_window) == (15, 19)  # untouched by the history (off at 13)

    leak = next(f for f in w.findings if f.code == "GD-RUN-MEM-LEAK")
    assert "remember" in leak.title
    assert "allocation sites that grew (allocation history, no OOM needed):" in leak.evidence
    assert any("remember" in line and "1.0 MiB per step" in line for line in leak.evidence), leak.evidence


def test_a_steady_loop_records_no_history_and_writes_no_sites(tmp_path: Path, fake: FakeCuda) -> None:
    with _watch(tmp_path, "steady") as w:
        train(fake, 30, leak=False)
    assert fake.switches == []
    assert not (w.run_dir / "leak-sites-rank0.json").exists()
    assert "GD-RUN-MEM-LEAK" not in {f.code for f in w.findings}


def test_the_steps_recorded_with_history_are_left_out_of_the_watch_figures(tmp_path: Path, fake: FakeCuda) -> None:
    """As under ``run``: the 5 steps that ran with allocation history (100 ms more each, the first
    800 ms, against 20 ms steps) are out of every steady figure and read as no stall or one-off."""
    with _watch(tmp_path, "figures", steps=60, profile=True) as w:
        train(fake, 60, slow=0.1)
    run = load_run(w.run_dir)
    assert run.leak_sites[0].history_steps == (9, 13)
    records = {s.step: s.step_ms for s in run.steps[0]}
    assert min(records[s] for s in range(9, 14)) >= 40.0  # the fake made them slow
    (stats,) = run_stats(run)
    assert stats.history_steps == (9, 10, 11, 12, 13)
    assert stats.steps == 60 - 6 - 5 - 5  # warm-up 0-5, the profiler window 55-59, the 5 recorded
    # ~20 ms steady steps; with the 5 recorded ones (>= 120 ms, the first ~820 ms) the mean would be ~47 ms
    assert stats.one_off_steps == () and stats.mean_step_ms < 30.0
    assert "5 steps (9-13) ran with allocation history on" in stats.history
    codes = {f.code for f in w.findings}
    assert "GD-RUN-MEM-LEAK" in codes
    assert not codes & {"GD-RUN-PERIODIC-STALL", "GD-RUN-SLOWDOWN", "GD-RUN-STALL"}, codes


def test_a_block_that_ends_while_recording_turns_the_history_off_and_says_which_steps_ran_with_it(
        tmp_path: Path, fake: FakeCuda) -> None:
    """The loop goes on after the watch: the history must not stay on (every allocation would keep
    recording a stack). Ended after step 10 (on at boundary 8, base at 9): steps 9-10 ran with it."""
    with _watch(tmp_path, "short", steps=60) as w:
        train(fake, 11)
    assert w.status == "completed" and fake.switches == [True, False]
    sites = load_run(w.run_dir).leak_sites[0]
    assert (sites.step_from, sites.step_to, sites.sites, sites.history_steps) == (9, -1, (), (9, 10))

    fake.switches.clear()
    with pytest.raises(RuntimeError, match="dies while the history is on"):
        with _watch(tmp_path, "dies", steps=60) as w2:
            train(fake, 60, die_at=9)  # step 9: the first with the history on
    assert w2.status == "crashed" and fake.switches == [True, False]
    sites = load_run(w2.run_dir).leak_sites[0]
    assert (sites.step_from, sites.step_to, sites.sites, sites.history_steps) == (9, -1, (), (9, 9))


def test_each_watch_in_a_process_checks_afresh(tmp_path: Path, fake: FakeCuda) -> None:
    """A notebook watches several times in one kernel: the second watch of a leaking loop records
    and names the site again (the check is once per watch, not once per process)."""
    for name in ("first", "second"):
        fake.switches.clear()
        with _watch(tmp_path, name) as w:
            train(fake, 20)
        assert fake.switches == [True, False], name
        assert "remember" in next(f for f in w.findings if f.code == "GD-RUN-MEM-LEAK").title
