"""The engine against a plain PyTorch loop on the CPU: same losses, accumulation, guards."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from gpudoctor.train import NonFiniteLossError, RobustConfig, Trainer

from helpers_train import Recorder, cpu_config, plain_loop, tiny_data, tiny_loader, tiny_model


def _sgd(model):
    return torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)


def test_same_losses_and_params_as_plain_loop_fp32():
    reference = tiny_model()
    ref_losses = plain_loop(reference, tiny_loader(), epochs=2)
    model, rec = tiny_model(), Recorder()
    result = Trainer(model, _sgd(model), nn.CrossEntropyLoss(), config=cpu_config(), observers=[rec]).fit(
        tiny_loader(), epochs=2)
    assert rec.losses == ref_losses  # bit for bit
    for a, b in zip(reference.parameters(), model.parameters()):
        assert torch.equal(a, b)
    assert result.steps == 16 and result.epochs_completed == 2 and result.samples == 128
    assert result.global_batch == 8 and result.world_size == 1 and result.precision == "fp32"
    assert rec.started == rec.ended == 1
    assert all(r.micro_steps == 1 and r.samples == 8 and r.loss_finite for r in rec.records)


def test_accumulation_matches_one_big_batch():
    big = tiny_model(dropout=0.0)
    plain_loop(big, tiny_loader(batch_size=16), epochs=1)
    model = tiny_model(dropout=0.0)
    result = Trainer(model, _sgd(model), nn.CrossEntropyLoss(), config=cpu_config(grad_accum_steps=2)).fit(
        tiny_loader(batch_size=8), epochs=1)
    assert result.steps == 4 and result.global_batch == 16
    for a, b in zip(big.parameters(), model.parameters()):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)


def test_fit_accepts_a_dataset_and_validates():
    model = tiny_model()
    trainer = Trainer(model, _sgd(model), nn.CrossEntropyLoss(), config=cpu_config(batch_size=16))
    result = trainer.fit(tiny_data(), epochs=1, val_loader=tiny_loader(batch_size=32))
    assert result.steps == 4 and result.val_loss is not None and result.val_loss > 0
    with pytest.raises(ValueError, match="batch_size"):
        Trainer(model, _sgd(model), nn.CrossEntropyLoss(), config=cpu_config()).fit(tiny_data())


def test_lr_scaling_linear_and_sqrt():
    for rule, factor in (("linear", 4.0), ("sqrt", 2.0)):
        model = tiny_model()
        opt = _sgd(model)
        cfg = cpu_config(lr_scaling=rule, base_batch_size=4, max_steps=1)
        result = Trainer(model, opt, nn.CrossEntropyLoss(), config=cfg).fit(tiny_loader(batch_size=16))
        assert result.lr_scale == pytest.approx(factor)
        assert opt.param_groups[0]["lr"] == pytest.approx(0.05 * factor)


class _NanAt(nn.Module):
    """Returns NaN outputs on the calls listed in ``bad``."""

    def __init__(self, bad: set[int]) -> None:
        super().__init__()
        self.inner = tiny_model(dropout=0.0)
        self.bad, self.calls = bad, 0

    def forward(self, x):
        out = self.inner(x)
        self.calls += 1
        return out * float("nan") if self.calls - 1 in self.bad else out


def test_nan_guard_skip_leaves_params_untouched_on_bad_step():
    model = _NanAt({2})
    cfg = cpu_config(robust=RobustConfig(nonfinite="skip"))
    rec = Recorder()
    trainer = Trainer(model, _sgd(model), nn.CrossEntropyLoss(), config=cfg, observers=[rec])
    result = trainer.fit(tiny_loader(), epochs=1)
    assert result.skipped_steps == 1 and result.steps == 8
    assert [r.loss_finite for r in rec.records].count(False) == 1
    assert all(torch.isfinite(p).all() for p in model.parameters())


def test_nan_guard_stop_raises_with_the_fix():
    model = _NanAt({3})
    trainer = Trainer(model, _sgd(model), nn.CrossEntropyLoss(), config=cpu_config())
    with pytest.raises(NonFiniteLossError, match="step 3.*grad_clip_norm"):
        trainer.fit(tiny_loader(), epochs=1)


def test_nan_guard_skip_raises_after_max_skips():
    model = _NanAt(set(range(100)))
    cfg = cpu_config(robust=RobustConfig(nonfinite="skip", max_skips=3))
    with pytest.raises(NonFiniteLossError, match="3 consecutive steps were skipped.*from step 0 to step 2"):
        Trainer(model, _sgd(model), nn.CrossEntropyLoss(), config=cfg).fit(tiny_loader(), epochs=1)


def test_with_block_leaves_only_a_group_the_trainer_joined(monkeypatch):
    """``with Trainer(...)``: ``destroy_distributed`` at a clean end, only once, nothing for one
    process, and no teardown after an exception (it could hang while other ranks wait)."""
    from gpudoctor.train import parallel as parallel_mod

    calls = []
    monkeypatch.setattr(parallel_mod, "destroy_distributed", lambda: calls.append(True))
    model = tiny_model()
    with Trainer(model, _sgd(model), nn.CrossEntropyLoss(), config=cpu_config()) as trainer:
        trainer.fit(tiny_loader(), epochs=1)
    trainer.close()
    assert calls == []  # one process: no group was joined
    trainer.parallel.owns_group = True  # as under torchrun when the trainer made the group
    trainer.close()
    trainer.close()
    assert calls == [True]
    trainer.parallel.owns_group = True
    with pytest.raises(RuntimeError, match="boom"), trainer:
        raise RuntimeError("boom")
    assert calls == [True] and trainer.parallel.owns_group
