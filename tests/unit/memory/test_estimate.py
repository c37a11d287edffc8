"""Memory estimate on the CPU: accounting of weights/grads/state, linear activations, CLI."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from gpudoctor.analysis import memory_model
from gpudoctor.cli.app import app
from gpudoctor.memory.estimate import EstimateConfig, estimate_memory
from gpudoctor.memory.inputs import batch_factory, load_factory

sys.path.insert(0, str(Path(__file__).parent))
import toy_models  # noqa: E402


def test_fit_affine_and_max_batch() -> None:
    fixed, per = memory_model.fit_affine([(2, 1200), (4, 1400), (8, 1800)])
    assert (fixed, per) == pytest.approx((1000.0, 100.0))
    assert memory_model.peak_at(fixed, per, 16) == 2600
    assert memory_model.max_batch_that_fits(fixed, per, 10_000, margin=0.1) == 80
    assert memory_model.max_batch_that_fits(20_000, per, 10_000) is None
    with pytest.raises(ValueError, match="two or more different batch sizes"):
        memory_model.fit_affine([(4, 1), (4, 2)])


def test_optimizer_state_sizes() -> None:
    assert memory_model.optimizer_state_bytes("adamw", 100) == 200
    assert memory_model.optimizer_state_bytes("sgd_momentum", 100) == 100
    assert memory_model.optimizer_state_bytes("sgd", 100) == 0
    with pytest.raises(ValueError, match="unknown optimizer"):
        memory_model.optimizer_state_bytes("shampoo", 1)


def test_cpu_estimate_counts_parts_exactly() -> None:
    est = estimate_memory(toy_models.mlp, batch_factory("image:32:10"),
                          EstimateConfig(batch_size=64, device="cpu", probe_batches=(2, 4)))
    params = (32 * 64 + 64) + (64 * 10 + 10)
    assert est.param_count == params
    assert est.params_bytes == est.grads_bytes == 4 * params
    assert est.optimizer_state_bytes == 8 * params
    assert est.method == "saved-tensors" and est.device == "cpu"
    # saved activations per sample of this MLP: input (32) + first output (64) + ReLU output (64)
    # + logits for the loss (10, fp32) + log-softmax (10) -> grows linearly with the batch
    assert 4 * (32 + 64) <= est.activation_bytes_per_sample <= 4 * (32 + 64 + 64 + 10 + 10 + 10)
    assert est.peak_bytes == est.fixed_bytes + 64 * est.activation_bytes_per_sample


def test_activation_share_scales_with_input_size() -> None:
    small = estimate_memory(toy_models.convnet, batch_factory("image:3x8x8:10"),
                            EstimateConfig(batch_size=8, device="cpu", probe_batches=(1, 2)))
    large = estimate_memory(toy_models.convnet, batch_factory("image:3x16x16:10"),
                            EstimateConfig(batch_size=8, device="cpu", probe_batches=(1, 2)))
    ratio = large.activation_bytes_per_sample / small.activation_bytes_per_sample
    assert 3.5 < ratio < 4.5  # 4x the pixels, 4x the conv activations


def test_bad_config_errors() -> None:
    with pytest.raises(ValueError, match="optimizer 'lbfgs' is not one of"):
        EstimateConfig(batch_size=1, optimizer="lbfgs")
    with pytest.raises(ValueError, match="batch_size must be at least 1"):
        EstimateConfig(batch_size=0)


def test_input_and_model_spec_errors() -> None:
    from gpudoctor.errors import GpuDoctorUserError

    with pytest.raises(GpuDoctorUserError, match="image:CxHxW:CLASSES"):
        batch_factory("image:3x224")
    with pytest.raises(GpuDoctorUserError, match="MODULE:FUNCTION"):
        load_factory("resnet18")
    with pytest.raises(GpuDoctorUserError, match="cannot import"):
        load_factory("no_such_module_xyz:f")


def test_cli_estimate_json_and_text() -> None:
    runner = CliRunner()
    args = ["memory", "estimate", "--model", "toy_models:mlp", "--input", "image:32:10",
            "--batch-size", "16", "--device", "cpu", "--probes", "2,4"]
    result = runner.invoke(app, args + ["--json"])
    assert result.exit_code == 0, result.output
    payload = json.loads(result.stdout)
    assert payload["batch_size"] == 16 and payload["method"] == "saved-tensors"
    text = runner.invoke(app, args)
    assert "estimated peak" in text.stdout and "activations per sample" in text.stdout
    bad = runner.invoke(app, ["memory", "estimate", "--model", "toy_models:mlp", "--input",
                              "image:32:10", "--batch-size", "16", "--optimizer", "lbfgs"])
    assert bad.exit_code == 2 and "lbfgs" in bad.output
