"""Goldens for what a person reads: the run summary and the ``--try`` before/after table."""

from __future__ import annotations

import io
from pathlib import Path

from rich.console import Console

from gpudoctor.records.memory import AllocatorStats
from gpudoctor.records.run import RunManifest
from gpudoctor.records.rundir import RunData
from gpudoctor.records.step import StepRecord
from gpudoctor.analysis.run_stats import run_stats
from gpudoctor.report.run_summary import render_summary
from gpudoctor.report.try_view import compare, render_try


def _text(renderable) -> str:
    console = Console(file=io.StringIO(), width=100, color_system=None)
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


def test_try_golden(golden) -> None:
    before = _run((), step_ms=20.0, wait_ms=8.0)
    after = _run(("num_workers=8", "pin_memory"), step_ms=12.0, wait_ms=0.5)
    comparison = compare(before, after)
    assert comparison.gain is not None and comparison.gain > 0.5
    golden("run/try_table.txt", _text(render_try(comparison)))
