"""TrainConfig: validation errors say what to do; files round-trip; presets are valid."""

from __future__ import annotations

import pytest

from gpudoctor.train import CheckpointConfig, ParallelConfig, PrecisionConfig, RobustConfig, TrainConfig, presets
from gpudoctor.train.precision import resolve_dtype


@pytest.mark.parametrize("make,message", [
    (lambda: PrecisionConfig(dtype="fp8"), r"precision.dtype='fp8' is not valid; use one of: auto, fp32"),
    (lambda: PrecisionConfig(grad_clip_norm=0), r"grad_clip_norm=0 must be a positive"),
    (lambda: TrainConfig(grad_accum_steps=0), r"grad_accum_steps=0 must be a positive"),
    (lambda: TrainConfig(lr_scaling="linear"), r"needs base_batch_size"),
    (lambda: ParallelConfig(strategy="dp"), r"use one of: auto, none, ddp, fsdp"),
    (lambda: ParallelConfig(comm_hook="powersgd"), r"parallel.comm_hook='powersgd' is not valid; use one of: none, fp16, bf16"),
    (lambda: ParallelConfig(static_graph=True, find_unused_parameters=True), r"keep only static_graph"),
    (lambda: CheckpointConfig(every_steps=10), r"set dir to a folder"),
    (lambda: RobustConfig(nonfinite="ignore"), r"use one of: stop, skip, off"),
    (lambda: TrainConfig.from_dict({"precision": {"dtyp": "bf16"}}), r"unknown setting\(s\) precision.dtyp; valid"),
    (lambda: TrainConfig.from_dict({"epochs": 3}), r"unknown setting\(s\) epochs"),
])
def test_bad_config_errors_name_the_fix(make, message):
    with pytest.raises(ValueError, match=message):
        make()


def test_config_is_frozen():
    with pytest.raises(AttributeError):
        TrainConfig().grad_accum_steps = 2  # type: ignore[misc]


@pytest.mark.parametrize("suffix", [".toml", ".json"])
def test_file_round_trip(tmp_path, suffix):
    cfg = TrainConfig(grad_accum_steps=4, lr_scaling="sqrt", base_batch_size=256,
                      precision=PrecisionConfig(dtype="bf16", grad_clip_norm=1.0),
                      parallel=ParallelConfig(strategy="fsdp", fsdp_shard_modules=("Block",)),
                      checkpoint=CheckpointConfig(dir="ckpt", every_steps=100))
    path = tmp_path / f"train{suffix}"
    cfg.to_file(path)
    assert TrainConfig.from_file(path) == cfg


def test_toml_refuses_what_it_cannot_hold(tmp_path):
    with pytest.raises(ValueError, match="save it as .json"):
        TrainConfig(seed=None).to_file(tmp_path / "x.toml")
    with pytest.raises(ValueError, match=".toml or .json"):
        TrainConfig().to_file(tmp_path / "x.yaml")


def test_every_preset_is_valid():
    for name, make in presets.PRESETS.items():
        assert isinstance(make(), TrainConfig), name


def test_precision_needs_the_right_device():
    import torch

    assert resolve_dtype("auto", torch.device("cpu")) == "fp32"
    with pytest.raises(ValueError, match="needs a CUDA GPU"):
        resolve_dtype("fp16", torch.device("cpu"))


def test_the_toml_example_in_the_docs_is_valid(tmp_path):
    from pathlib import Path

    text = (Path(__file__).resolve().parents[3] / "docs" / "train.md").read_text(encoding="utf-8")
    block = text.split("```toml\n", 1)[1].split("```", 1)[0]
    (tmp_path / "train.toml").write_text(block, encoding="utf-8")
    cfg = TrainConfig.from_file(tmp_path / "train.toml")
    assert cfg.grad_accum_steps == 4 and cfg.parallel.strategy == "ddp" and cfg.checkpoint.keep_last == 3
