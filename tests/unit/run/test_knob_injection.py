"""The ``--try`` model knobs injected into unmodified CPU scripts: what the child really ran.

Each test starts one instrumented child (the real launcher and probes) with knobs and reads its
``config-rank0.json`` and output. The scripts know nothing of gpudoctor.
"""

from __future__ import annotations

import sys
from pathlib import Path

import knob_scripts
import pytest

from gpudoctor.collectors.knobs import parse_knobs
from gpudoctor.collectors.launch import RunSpec, run_instrumented
from gpudoctor.records.rundir import load_run


def _run(tmp_path: Path, script: str, knobs: str, steps: int = 8):
    path = tmp_path / "train.py"
    path.write_text(script, encoding="utf-8")
    spec = RunSpec(command=(sys.executable, str(path)), run_dir=tmp_path / "rd", steps=steps, profile=False,
                   knobs=parse_knobs(knobs), echo_child=False, sample_gpu=False)
    outcome = run_instrumented(spec, say=lambda message: None)
    log = (tmp_path / "rd" / "stdout.log").read_text(encoding="utf-8")
    assert outcome.exit_code == 0, log
    return load_run(tmp_path / "rd"), log


def _line(log: str, tag: str) -> list[str]:
    return next(line.split() for line in log.splitlines() if line.startswith(tag))


@pytest.mark.slow
def test_bf16_channels_last_and_compile_on_a_cnn(tmp_path: Path) -> None:
    run, log = _run(tmp_path, knob_scripts.CNN, "bf16,channels_last,compile")
    config = run.configs[0]
    assert run.manifest.knobs == ("bf16", "channels_last", "compile")
    assert config.autocast_dtypes == ("bfloat16",) and not config.grad_scaler
    assert config.channels_last is True and config.compiled is True
    # the forward ran under autocast, the loss too (cross_entropy autocasts to float32)
    assert _line(log, "DTYPES")[1:3] == ["torch.bfloat16", "torch.float32"]
    assert _line(log, "ORDER")[1] == "backward,clip,step"  # no GradScaler with bf16
    assert config.knob_notes == (
        "channels_last: Sequential weights and its 4-D inputs in torch.channels_last",
        "compile: torch.compile(Sequential.forward), default mode; the first steps compile",
        "bf16: autocast('cpu', bfloat16) from Sequential's forward to backward(); no GradScaler",
    )
    assert all(s.loss_finite for s in run.steps[0])
    # compiling the first steps outlasts the 30 s stall limit on a loaded 2-core machine: it is
    # timed (and left out of the stall clock), not taken for a stall
    assert sum(s.compile_ms or 0.0 for s in run.steps[0]) > 0
    assert run.manifest.status == "stopped"


def test_fp16_adds_a_grad_scaler_in_the_right_order(tmp_path: Path) -> None:
    run, log = _run(tmp_path, knob_scripts.CNN, "fp16")
    config = run.configs[0]
    assert config.autocast_dtypes == ("float16",) and config.grad_scaler is True
    assert _line(log, "DTYPES")[1] == "torch.float16"
    order = _line(log, "ORDER")
    # scale -> backward -> unscale_ (before the script's clip) -> clip -> step -> update
    assert order[1] == "scale,backward,unscale_,clip,step,update"
    assert float(order[3]) < 100.0  # clipped the true gradient norm, not one scaled by 65536
    steps = run.steps[0]
    assert all(s.scaler_scale is not None for s in steps[:-1])  # our scaler's update() was recorded
    assert all(s.loss_finite for s in steps) and steps[0].loss < 10  # the unscaled loss is recorded
    assert len({s.loss for s in steps}) == len(steps)  # each step its own loss (no stale scaled-loss id)
    assert "overridden after learning rate scheduler" not in log  # the scheduler's mark is kept


def test_knobs_that_cannot_apply_say_so(tmp_path: Path) -> None:
    run, _ = _run(tmp_path, knob_scripts.MLP_OWN_AUTOCAST, "bf16,channels_last,tf32,non_blocking")
    config = run.configs[0]
    assert config.channels_last is None and config.autocast_dtypes == ("bfloat16",)
    assert config.knob_notes == (
        "channels_last: not applied: Sequential has no 4-D (convolution) weights",
        "bf16: not applied: the script already uses autocast (bfloat16)",
        "non_blocking: no effect on a CPU run",
        "tf32: no effect on a CPU run",
    )


def test_loader_knobs_without_a_dataloader_say_so(tmp_path: Path) -> None:
    # batches sliced from host tensors (the planted pageable_copies): --try pin_memory measured -6%
    # there on an H200 while pinning the tensor (gpudoctor fix) measured +263%: the knob never applied
    run, _ = _run(tmp_path, knob_scripts.TWO_OPTIMIZERS, "num_workers=2,persistent_workers")
    assert run.configs[0].knob_notes == (
        "num_workers, persistent_workers: not applied: the script built no torch DataLoader (batches made "
        "another way: pin a host tensor once with .pin_memory(); gpudoctor fix does that)",)


def test_fp16_with_two_optimizers_is_not_applied(tmp_path: Path) -> None:
    run, _ = _run(tmp_path, knob_scripts.TWO_OPTIMIZERS, "fp16")
    config = run.configs[0]
    assert config.grad_scaler is False and config.autocast_dtypes == ()
    assert config.knob_notes == (
        "fp16: not applied: several optimizers (a GAN?); try bf16, which needs no GradScaler",)
    assert all(s.loss_finite for s in run.steps[0])


@pytest.mark.distributed
def test_fp16_and_compile_under_ddp_on_two_gloo_ranks(tmp_path: Path) -> None:
    """The DDP wrapper is the trained model: autocast and the scaler around it, compile on its
    .module; every rank applies the same knobs and records what they did."""
    import run_scripts

    script = tmp_path / "ddp.py"
    script.write_text(run_scripts.DDP.replace(
        "torch.nn.Linear(8, 1)",
        "torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1))"), encoding="utf-8")
    spec = RunSpec(command=(sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
                            str(script)),
                   run_dir=tmp_path / "rd", steps=10, profile=False, knobs=parse_knobs("fp16,compile"),
                   echo_child=False, sample_gpu=False)
    outcome = run_instrumented(spec, say=lambda message: None)
    assert outcome.exit_code == 0, (tmp_path / "rd" / "stdout.log").read_text()[-3000:]
    run = load_run(tmp_path / "rd")
    assert sorted(run.configs) == [0, 1]
    for config in run.configs.values():
        assert config.autocast_dtypes == ("float16",) and config.grad_scaler and config.compiled
        assert config.local_world_size == 2
        assert config.knob_notes[0] == "compile: torch.compile(Sequential.forward), default mode; the first steps compile"
        assert config.knob_notes[1].startswith("fp16: autocast('cpu', float16) from DistributedDataParallel's forward")
    for steps in run.steps.values():
        assert len(steps) == 10 and all(s.loss_finite and s.scaler_scale for s in steps[:-1])
