"""Goldens for what a person reads: the run summary and the ``--try`` before/after table."""

from __future__ import annotations

import io
from pathlib import Path

import pytest

from rich.console import Console

from gpudoctor.records.memory import AllocatorStats
from gpudoctor.records.run import RankConfig, RunManifest
from gpudoctor.records.rundir import RunData
from gpudoctor.records.step import StepRecord
from gpudoctor.analysis.run_stats import run_stats
from gpudoctor.report.run_summary import render_summary
from gpudoctor.analysis.try_compare import judge, needs_more
from gpudoctor.report.try_view import compare, render_try, try_verdict


def _text(renderable, width: int = 100) -> str:
    console = Console(file=io.StringIO(), width=width, color_system=None)
    console.print(renderable)
    return console.file.getvalue()


def _steps(rank: int, n: int, *, step_ms: float, wait_ms: float, gpu: bool = True) -> list[StepRecord]:
    mem = AllocatorStats(allocated_bytes=2_000_000_000, reserved_bytes=3_000_000_000,
                         peak_allocated_bytes=2_500_000_000, peak_reserved_bytes=3_000_000_000)
    return [
        StepRecord(
            rank=rank, step=i, t_end_s=1_780_000_000.0 + i, step_ms=step_ms + (i % 3), data_wait_ms=wait_ms,
            h2d_ms=0.4, gpu_ms=step_ms - wait_ms if gpu else None, h2d_bytes=6_000_000, h2d_pageable_bytes=6_000_000,
            h2d_copies=2, h2d_blocking_copies=2, host_syncs=1, samples=64, mem=mem if gpu else None,
        )
        for i in range(n)
    ]


def _run(knobs: tuple[str, ...], *, step_ms: float, wait_ms: float, status: str = "stopped") -> RunData:
    manifest = RunManifest(
        command=("python", "train.py", "--lr", "0.1"), started_at=1_780_000_000.0, status=status,
        exit_code=0, steps_requested=30, knobs=knobs, ranks=(0, 1), profile_window=(10, 14),
        notes=("gpu.jsonl: NVML could not start",),
    )
    return RunData(path=Path("rd"), manifest=manifest,
                   steps={0: _steps(0, 30, step_ms=step_ms, wait_ms=wait_ms),
                          1: _steps(1, 30, step_ms=step_ms + 1, wait_ms=wait_ms)})


def test_step_stats_skip_warmup_and_window() -> None:
    stats = run_stats(_run((), step_ms=20.0, wait_ms=8.0))[0]
    assert stats.steps == 20  # 30 - 5 warm-up - 5 in the profiler window
    assert stats.unit == "samples/s" and stats.pageable_frac == 1.0 and stats.h2d_mb == 6.0


def test_run_summary_golden(golden) -> None:
    golden("run/run_summary.txt", _text(render_summary(_run((), step_ms=20.0, wait_ms=8.0))))


def test_run_summary_crashed_golden(golden) -> None:
    manifest = RunManifest(command=("python", "crash.py"), started_at=0.0, status="crashed", exit_code=1,
                           error="Traceback (most recent call last):\nRuntimeError: boom")
    run = RunData(path=Path("rd"), manifest=manifest)
    golden("run/run_summary_crashed.txt", _text(render_summary(run, full=False)))


def _config(notes: tuple[str, ...]) -> RankConfig:
    return RankConfig(rank=0, local_rank=0, world_size=2, pid=1, device="cuda:0", knob_notes=notes)


def _arm(knobs: tuple[str, ...], step_ms: list[float], wait_ms: float, notes: tuple[str, ...] = ()) -> list[RunData]:
    runs = []
    for i, ms in enumerate(step_ms):
        run = _run(knobs, step_ms=ms, wait_ms=wait_ms)
        run.path = Path(f"rd/{'try' if knobs else 'baseline'}{'' if i == 0 else f'-{i + 1}'}")
        if knobs:
            run.configs = {0: _config(notes)}
        runs.append(run)
    return runs


@pytest.mark.parametrize("width", [80, 120])
def test_try_golden(golden, width: int) -> None:
    before = _arm((), [20.0, 20.6], wait_ms=8.0)
    after = _arm(("num_workers=7", "pin_memory", "non_blocking"), [12.0, 12.2], wait_ms=0.5,
                 notes=("non_blocking: not applied: no copy from pinned host memory to the GPU was seen "
                        "(combine it with pin_memory)",))
    comparison = compare(before, after)
    assert comparison.judgement is not None and comparison.judgement.verdict == "faster"
    assert comparison.run_dirs == (("baseline", "rd/baseline"), ("try", "rd/try"),
                                   ("baseline", "rd/baseline-2"), ("try", "rd/try-2"))
    golden(f"run/try_table-{width}.txt", _text(render_try(comparison), width))


def test_a_loss_is_not_recommended(golden) -> None:
    """A knob that measured -80% is "not recommended here - do not apply", never the fix."""
    before = _arm((), [20.0, 20.4], wait_ms=1.0)
    after = _arm(("num_workers=0",), [106.0, 107.0], wait_ms=80.0)
    comparison = compare(before, after)
    verdict = try_verdict(comparison)
    assert comparison.judgement.verdict == "slower" and round(comparison.gain, 2) == -0.80
    assert verdict == ("measured loss: -80% ± 1.8% throughput with num_workers=0 (n = 2 baseline + 2 try runs): "
                       "not recommended here - do not apply")
    golden("run/try_table-loss-80.txt", _text(render_try(comparison), 80))


def test_within_the_noise_and_single_runs_are_not_the_fix() -> None:
    noisy = compare(_arm((), [20.0, 24.0], wait_ms=1.0), _arm(("tf32",), [19.0, 23.0], wait_ms=1.0))
    assert noisy.judgement.verdict == "within_noise"
    assert "within the noise" in try_verdict(noisy) and "not recommended here" in try_verdict(noisy)
    single = compare(_run((), step_ms=20.0, wait_ms=8.0), _run(("tf32",), step_ms=10.0, wait_ms=0.5))
    assert single.judgement.verdict == "within_noise"  # one run of each: no spread, no proof
    tiny = compare(_arm((), [20.0, 20.01], wait_ms=1.0), _arm(("tf32",), [19.8, 19.81], wait_ms=1.0))
    assert tiny.judgement.verdict == "no_gain" and "below the 2% worth a change" in try_verdict(tiny)


def test_judge_needs_two_runs_each_and_stops_outside_the_noise() -> None:
    assert needs_more(judge([100.0], [150.0]))
    clear = judge([100.0, 101.0], [150.0, 149.0])
    assert clear.outside_noise and not needs_more(clear) and clear.verdict == "faster"
    overlap = judge([100.0, 110.0], [105.0, 112.0])
    assert not overlap.outside_noise and needs_more(overlap) and not needs_more(overlap, max_runs=2)
    assert round(overlap.noise, 4) == round(10 / 105, 4)  # the larger arm's range over its median


def test_a_run_with_knobs_that_crashed_is_not_the_fix() -> None:
    import dataclasses

    crashed = _run(("compile",), step_ms=5.0, wait_ms=0.5)
    crashed.manifest = dataclasses.replace(crashed.manifest, status="crashed", exit_code=1)
    comparison = compare(_arm((), [20.0, 20.4], wait_ms=1.0)[:1], [crashed])
    assert comparison.failed == "crashed" and comparison.judgement is None and comparison.after["throughput"] is None
    assert try_verdict(comparison) == ("the run with compile crashed: not recommended here - do not apply "
                                       "(its stdout.log says why)")
