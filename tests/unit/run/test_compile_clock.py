"""The supervisor's clocks with compilations: compile time stops the stall clock and runs its own.

Pure bookkeeping, no child: compile events are written as the probes write them
(``compile-pid{PID}.jsonl``) and the supervisor's checks are called at chosen times.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gpudoctor.analysis.compile_time import compile_line, compile_time, step_ranges
from gpudoctor.cli.progress import run_text
from gpudoctor.collectors.compile_watch import CompileWatch
from gpudoctor.collectors.supervise import Supervisor
from gpudoctor.collectors.watch import ProgressReporter, RunProgress
from gpudoctor.records.step import StepRecord


def _event(run_dir: Path, pid: int, event: str, t: float) -> None:
    with (run_dir / f"compile-pid{pid}.jsonl").open("a") as fh:
        fh.write(json.dumps({"event": event, "t": t, "pid": pid, "rank": 0, "step": 0}) + "\n")


def _supervisor(run_dir: Path, **limits: float) -> Supervisor:
    said: list[str] = []
    sup = Supervisor(None, run_dir, first_step_timeout_s=limits.get("first", 10.0),  # type: ignore[arg-type]
                     stall_timeout_s=limits.get("stall", 5.0), compile_timeout_s=limits.get("compile", 60.0),
                     grace_s=0.0, say=said.append)
    sup.started = 1000.0
    return sup


def test_compile_seconds_are_the_union_over_processes_and_count_an_open_one(tmp_path: Path) -> None:
    _event(tmp_path, 1, "start", 10.0)
    _event(tmp_path, 2, "start", 12.0)  # rank 1 compiles while rank 0 does: counted once
    _event(tmp_path, 1, "end", 15.0)
    _event(tmp_path, 2, "end", 16.0)
    (tmp_path / "compile-pid1.jsonl").open("a").write('{"event": "start", "t": 20.0, "pid": 1')  # half a line
    watch = CompileWatch(tmp_path)
    watch.poll(now=30.0)
    assert watch.seconds(0.0, 30.0) == pytest.approx(6.0) and not watch.compiling()
    with (tmp_path / "compile-pid1.jsonl").open("a") as fh:
        fh.write(', "rank": 0, "step": 1}\n')
    watch.poll(now=30.0)
    assert watch.compiling() and watch.seconds(0.0, 30.0) == pytest.approx(16.0)
    assert watch.seconds(14.0, 30.0) == pytest.approx(12.0)  # only what follows the last step


def test_a_long_compile_before_the_first_step_is_no_first_step_timeout(tmp_path: Path) -> None:
    sup = _supervisor(tmp_path, first=10.0, compile=60.0)
    _event(tmp_path, 1, "start", 1002.0)
    sup.compiles.poll(1002.0)
    sup._check_stall(1050.0)  # 48 s compiling, 2 s of start-up before it
    assert sup.stop_reason == ""
    _event(tmp_path, 1, "end", 1055.0)
    sup.compiles.poll(1055.0)
    sup._check_stall(1064.0)  # 2 + 9 s outside compilation: over the 10 s limit
    assert sup.stop_reason == "timeout" and sup.compile_limit_s is None and not sup.compiling
    assert sup.compile_s == 53.0
    assert "no optimizer step in 64 s (limit 10 s, 53 s of it compiling, which does not count)" in sup.message


def test_a_compile_that_hangs_is_stopped_by_its_own_limit(tmp_path: Path) -> None:
    sup = _supervisor(tmp_path, stall=5.0, compile=60.0)
    _event(tmp_path, 1, "start", 1001.0)
    sup.compiles.poll(1001.0)
    sup._check_stall(1060.0)
    assert sup.stop_reason == ""
    sup._check_stall(1061.5)
    assert sup.stop_reason == "timeout" and sup.compile_limit_s == 60.0 and sup.compiling
    assert sup.message.startswith("stuck compiling before the first optimizer step: torch.compile compiled for 60 s")


def test_a_compile_the_supervisor_had_not_read_yet_still_counts(tmp_path: Path) -> None:
    sup = _supervisor(tmp_path, first=10.0)
    _event(tmp_path, 1, "start", 1008.0)  # written by the child after the last scan
    sup._check_stall(1011.0)  # 11 s without a step, 3 of them compiling
    assert sup.stop_reason == ""


def test_progress_says_compiling_with_its_seconds() -> None:
    seen: list[RunProgress] = []
    report = ProgressReporter(seen.append, total=60, window=None)
    for steps, compiling in [(0, None), (0, 1.2), (0, 1.7), (0, 2.1), (3, None), (3, 40.0)]:
        report(steps, False, compiling)
    assert [(p.steps, p.compiling_s) for p in seen] == [(0, None), (0, 1.2), (0, 2.1), (3, None), (3, 40.0)]
    assert run_text(seen[2]) == ("waiting for the first optimizer step", "compiling (2 s)")
    assert run_text(seen[4]) == ("training", "step 3 of 60 · compiling (40 s)")
    assert run_text(seen[3]) == ("training", "step 3 of 60")


def _steps(*values: tuple[float | None, int | None]) -> list[StepRecord]:
    return [StepRecord(rank=0, step=i, t_end_s=float(i), step_ms=100.0 + (ms or 0.0), compile_ms=ms, compiles=n)
            for i, (ms, n) in enumerate(values)]


def test_compile_time_names_its_total_and_steps() -> None:
    ct = compile_time(0, _steps((40_000.0, 2), (1_200.0, 1), (0.0, 0), (0.0, 0), (3_000.0, 1)))
    assert ct is not None and ct.steps == (0, 1, 4) and ct.compile_ms == pytest.approx(44_200.0)
    assert compile_line(ct) == "rank 0: compiling (torch.compile) took 44.2 s, in steps 0-1, 4"
    assert compile_time(0, _steps((0.0, 0), (None, None))) is None


def test_without_compile_callbacks_the_frame_counter_names_the_steps() -> None:
    ct = compile_time(1, _steps((None, 3), (None, 0), (None, 1)))
    assert ct is not None and ct.compile_ms is None and ct.steps == (0, 2)
    assert compile_line(ct) == ("rank 1: torch.compile compiled 4 frames in steps 0, 2, which took 0.2 s "
                                "in all (this torch reports no compile time of its own)")


def test_step_ranges_are_short() -> None:
    assert step_ranges([0, 1, 2, 7, 9, 10]) == "0-2, 7, 9-10"
    assert step_ranges(list(range(0, 30, 2))) == "0, 2, 4, 6, 8, 10, ..."


def _stopped(status: str, **fields) -> list:
    from gpudoctor.analysis.stall_rules import check_stall
    from gpudoctor.analysis.thresholds import Thresholds
    from gpudoctor.records.run import RunManifest
    from gpudoctor.records.rundir import RunData

    manifest = RunManifest(command=("python", "train.py"), started_at=0.0, status=status, **fields)
    steps = {0: _steps(*[(0.0, 0)] * 4)}
    return check_stall(RunData(path=Path("rd"), manifest=manifest, steps=steps), Thresholds())


def test_ctrl_c_during_a_long_compile_is_an_interruption_while_compiling_not_a_hang() -> None:
    (finding,) = _stopped("interrupted", idle_s=95.0, stall_limit_s=30.0, compile_s=93.0, compiling=True)
    assert finding.code == "GD-RUN-INTERRUPTED"
    assert finding.title.startswith("Interrupted (Ctrl-C) at step 4 while compiling (torch.compile, 93 s")
    assert finding.evidence[-1] == ("93 s of the 95 s without a step went to compiling (torch.compile); it was "
                                    "compiling when stopped, which the stall limit does not count")


def test_a_stall_says_how_much_of_the_wait_was_compiling() -> None:
    (finding,) = _stopped("stalled", idle_s=45.0, stall_limit_s=30.0, compile_s=14.0)
    assert finding.code == "GD-RUN-STALL" and finding.title.startswith("Stalled at step 4: no optimizer step for 45 s")
    assert finding.evidence[-1] == ("14 s of the 45 s without a step went to compiling (torch.compile), which the "
                                    "stall limit does not count")
