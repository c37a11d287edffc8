"""The printed fix quotes exactly the values ``--try``/``doctor`` inject: one plan for both."""

from __future__ import annotations

import re

import pytest

from gpudoctor.analysis.diagnose import diagnose
from gpudoctor.analysis.knob_map import first_testable, knobs_for, loader_plan, loader_workers
from gpudoctor.collectors.knobs import parse_knobs


@pytest.mark.parametrize(("cores", "current", "workers"), [
    (2, 0, 1), (4, 0, 3), (8, 0, 7), (16, 0, 8), (64, 2, 8), (64, 8, 16), (12, 8, 11), (1, 0, 1)])
def test_worker_count_from_the_cores_of_a_rank(cores: int, current: int, workers: int) -> None:
    assert loader_workers(cores, current) == workers


def _loader_run(build, *, cpus, ranks, on_gpu=True, **loader):
    base = dict(num_workers=0, pin_memory=False, persistent_workers=False, prefetch_factor=None)
    base.update(loader)
    cfg = dict(usable_cpus=cpus, local_world_size=ranks, loaders=(build.loader(**base),))
    if not on_gpu:
        cfg.update(device="cpu", cuda_device_index=None)
    config = build.config(**cfg)
    run = build.run(steps_by_rank={0: build.steps(data_wait_ms=24.0, gpu_ms=14.0 if on_gpu else None)},
                    configs={0: config}, windows={0: build.window(gpu_busy_frac=0.35)} if on_gpu else {})
    return diagnose(run), config


@pytest.mark.parametrize(("cpus", "ranks", "on_gpu", "expected"), [
    (16, 1, True, "num_workers=8,pin_memory,persistent_workers,prefetch_factor=4,non_blocking"),
    (6, 2, True, "num_workers=2,pin_memory,persistent_workers,prefetch_factor=4,non_blocking"),
    (2, 1, False, "num_workers=1,persistent_workers,prefetch_factor=4"),
])
def test_fix_text_quotes_the_knobs_doctor_tries(build, cpus, ranks, on_gpu, expected) -> None:
    findings, config = _loader_run(build, cpus=cpus, ranks=ranks, on_gpu=on_gpu)
    finding, knobs = first_testable(findings, config)
    assert finding.code == "GD-RUN-DATALOADER" and knobs == expected
    parse_knobs(knobs)  # a valid --try spec
    for knob in knobs.split(","):
        name, _, value = knob.partition("=")
        if name == "non_blocking":
            assert "non_blocking=True" in finding.fix
        elif value:
            assert re.search(rf"\b{name}={value}\b", finding.fix), (knob, finding.fix)
        else:
            assert f"{name}=True" in finding.fix
    if not on_gpu:
        assert "pin_memory" not in finding.fix and "non_blocking" not in finding.fix


def test_enough_workers_already_prescribes_cheaper_batches(build) -> None:
    findings, config = _loader_run(build, cpus=8, ranks=1, num_workers=7, persistent_workers=True,
                                   prefetch_factor=4, pin_memory=True)
    finding = next(f for f in findings if f.code == "GD-RUN-DATALOADER")
    assert finding.fix.startswith("# 7 workers already use the 8 cores per rank (8 CPUs / 1 rank on this node)")
    assert "num_workers=7," in finding.fix
    assert knobs_for(finding, config) == "non_blocking"  # the only change left to try


def test_unknown_cores_name_no_count(build) -> None:
    findings, config = _loader_run(build, cpus=None, ranks=None)
    finding = next(f for f in findings if f.code == "GD-RUN-DATALOADER")
    assert "num_workers=N," in finding.fix
    assert knobs_for(finding, config) == "pin_memory,non_blocking"  # no count: the worker knobs need one


def test_fp32_knobs_follow_the_fix_lines(build) -> None:
    config = build.config(autocast_dtypes=(), cudnn_benchmark=False, tf32_matmul=False, channels_last=False)
    run = build.run(steps_by_rank={0: build.steps()}, configs={0: config},
                    windows={0: build.window(gpu_busy_frac=0.97)})
    finding = next(f for f in diagnose(run) if f.code == "GD-RUN-FP32-COMPUTE")
    assert knobs_for(finding, config) == "cudnn_benchmark,tf32,channels_last,bf16"
    for line in ("cudnn.benchmark = True", "allow_tf32 = True", "channels_last", "torch.bfloat16"):
        assert line in finding.fix
    tuned = build.config(autocast_dtypes=(), channels_last=True)
    assert knobs_for(finding, tuned) == "bf16"


def test_plan_keeps_settings_already_right(build) -> None:
    plan = loader_plan(build.loader(num_workers=2, pin_memory=True, persistent_workers=True, prefetch_factor=8),
                       build.config(usable_cpus=64, local_world_size=8), True)
    assert plan.workers == 7 and plan.knobs() == "num_workers=7,non_blocking"


@pytest.mark.parametrize(("code", "knobs"), [
    ("GD-RUN-CHANNELS-LAST", "channels_last"), ("GD-RUN-CUDNN-BENCHMARK", "cudnn_benchmark"),
    ("GD-RUN-LAUNCH-BOUND", "compile"), ("GD-RUN-H2D-BLOCKING", "non_blocking"),
    ("GD-RUN-H2D-PAGEABLE", "pin_memory,non_blocking"), ("GD-RUN-FRAGMENTATION", "expandable_segments"),
    ("GD-RUN-HOST-SYNC", None)])
def test_each_testable_code_maps_to_valid_knobs(build, code: str, knobs: str | None) -> None:
    from gpudoctor.records.finding import Finding, Severity

    finding = Finding(code=code, severity=Severity.WARN, title="t")
    assert knobs_for(finding, build.config()) == knobs
    if knobs:
        parse_knobs(knobs)
