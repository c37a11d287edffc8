"""Golden tests of the terminal findings view (``render_findings``)."""

from __future__ import annotations

import io

import pytest

from rich.console import Console

from gpudoctor.analysis.diagnose import diagnose
from gpudoctor.report.findings_view import render_findings


def render(run) -> str:
    console = Console(file=io.StringIO(), width=100, color_system=None)
    console.print(render_findings(run, diagnose(run)))
    return console.file.getvalue()


def test_basic_user_view(build, golden):
    loader = build.loader(num_workers=0, pin_memory=False, persistent_workers=False,
                          prefetch_factor=None, batch_size=128, dataset="CifarLike")
    cfg = build.config(loaders=(loader,), autocast_dtypes=(), tf32_matmul=False,
                       cudnn_benchmark=False, channels_last=False)
    steps = build.steps(step_ms=42.0, data_wait_ms=27.3, gpu_ms=11.0, h2d_ms=0.6, host_syncs=1,
                        samples=128, h2d_bytes=1572864, h2d_pageable_bytes=1572864,
                        h2d_blocking_copies=2)
    run = build.run(steps_by_rank={0: steps}, configs={0: cfg},
                    windows={0: build.window(gpu_busy_frac=0.26, wall_ms=5 * 42.0, sync_calls=5,
                                             sync_ms=4.5)},
                    gpu=build.gpu_samples(util_gpu_pct=31.0),
                    command=("python", "-m", "gpudoctor.workloads.basic_user"))
    golden("analysis/findings_basic_user.txt", render(run))


def test_clean_view(build, golden):
    golden("analysis/findings_clean.txt", render(build.run()))


def test_cpu_only_view(build, golden):
    cpu = build.config(device="cpu", cuda_device_index=None, device_name="", autocast_dtypes=(),
                       loaders=(build.loader(num_workers=0, pin_memory=False),))
    steps = build.steps(data_wait_ms=30.0, gpu_ms=None, h2d_ms=None, mem=None, h2d_bytes=0,
                        h2d_copies=0)
    run = build.run(steps_by_rank={0: steps}, configs={0: cpu}, windows={}, gpu=[])
    golden("analysis/findings_cpu_only.txt", render(run))


def test_straggler_two_ranks_view(build, golden):
    run = build.run(
        steps_by_rank={0: build.steps(rank=0), 1: build.steps(rank=1)},
        configs={0: build.config(0, world_size=2), 1: build.config(1, world_size=2)},
        windows={0: build.window(0, nccl_ms=100.0, nccl_overlap_frac=0.0),
                 1: build.window(1, nccl_ms=10.0, nccl_overlap_frac=0.0)},
        gpu=build.gpu_samples(index=0, pids=(1000,)) + build.gpu_samples(index=1, pids=(1001,)),
        world_size=2, command=("torchrun", "--nproc_per_node", "2", "train.py"))
    golden("analysis/findings_straggler.txt", render(run))


def test_crashed_view(build, golden):
    run = build.run(steps_by_rank={}, windows={}, configs={}, gpu=[], status="crashed",
                    exit_code=1, error="RuntimeError: CUDA error: out of memory")
    golden("analysis/findings_crashed.txt", render(run))


@pytest.mark.parametrize("width", [80, 120])
@pytest.mark.parametrize("name", ["fp32_convnet", "straggler-2gpu"])
def test_recorded_run_views_fit_the_terminal(golden, name: str, width: int) -> None:
    """An H200 recording rendered at 80 and 120 columns: nothing wider than the terminal, and no
    number or rank of the step table cut (rich crops a cell with '…')."""
    from pathlib import Path

    from gpudoctor.analysis.diagnose import diagnose
    from gpudoctor.analysis.facts import run_facts
    from gpudoctor.analysis.thresholds import Thresholds
    from gpudoctor.records.rundir import load_run
    from gpudoctor.report.findings_view import breakdown_table, render_findings

    run = load_run(Path(__file__).resolve().parents[2] / "fixtures" / "runs" / name)
    console = Console(file=io.StringIO(), width=width, color_system=None)
    console.print(render_findings(run, diagnose(run), top=5))
    text = console.file.getvalue()
    assert max(len(line) for line in text.splitlines()) <= width
    table = io.StringIO()
    Console(file=table, width=width, color_system=None).print(breakdown_table(run_facts(run, Thresholds())))
    assert "…" not in table.getvalue()
    for rf in run_facts(run, Thresholds()).ranks:
        assert f"{rf.stats.throughput[0]:,.0f}" in table.getvalue()
    golden(f"analysis/view_{name}_{width}.txt", text)


@pytest.mark.parametrize("width", [80, 120])
def test_one_off_step_and_epoch_boundary_view(golden, width):
    # pytorch/examples' dcgan recorded on an H200: the one-time autotuning step under the table,
    # the epoch-boundary stall with each part it measured
    from pathlib import Path

    from gpudoctor.records.rundir import load_run

    run = load_run(Path(__file__).resolve().parents[2] / "fixtures" / "runs_corpus" / "dcgan")
    console = Console(file=io.StringIO(), width=width, color_system=None)
    console.print(render_findings(run, diagnose(run), top=0))
    golden(f"analysis/findings_dcgan_{width}.txt", console.file.getvalue())


@pytest.mark.parametrize("width", [80, 120])
def test_steps_with_allocation_history_are_named_under_the_table(build, golden, width):
    # `run` recorded allocation history in steps 30-34 to name a leak's sites: they are slow,
    # left out of the title's count (44/60) and said so under the table, no one-off line
    from gpudoctor.records.memory import LeakSites, SiteGrowth

    steps = build.steps(n=60, step_ms=lambda i: 400.0 if 30 <= i <= 34 else 40.0,
                        mem=lambda i: build.mem(allocated=2 * build.GIB + i * 4 * build.MIB))
    run = build.run(steps_by_rank={0: steps})
    run.leak_sites[0] = LeakSites(step_from=30, step_to=34, history_steps=(30, 34), sites=(
        SiteGrowth(site="train.py:41 train_step", bytes_from=4 * build.MIB, bytes_to=20 * build.MIB,
                   blocks_from=1, blocks_to=5),))
    console = Console(file=io.StringIO(), width=width, color_system=None)
    console.print(render_findings(run, diagnose(run), top=0))
    text = console.file.getvalue()
    assert "steps after warm-up (44/60)" in text and "one-time" not in text
    golden(f"analysis/findings_alloc_history_{width}.txt", text)
