"""Honest figures (steady throughput after warm-up, start-up on its own) and where an epoch ends."""

from __future__ import annotations

import time

import pytest
import torch
from torch import nn

from gpudoctor.train import CheckpointConfig, LogConfig, Trainer
from gpudoctor.train import checkpoint as ckpt
from gpudoctor.train.metrics import format_summary

from helpers_train import cpu_config, tiny_data, tiny_loader, tiny_model


class SlowStart(nn.Module):
    """A model whose first forward takes 0.4 s (what compilation does to the first step)."""

    def __init__(self) -> None:
        super().__init__()
        self.inner = tiny_model(dropout=0.0)
        self.calls = 0

    def forward(self, x):
        self.calls += 1
        if self.calls == 1:
            time.sleep(0.4)
        return self.inner(x)


def _trainer(model, **changes):
    return Trainer(model, torch.optim.SGD(model.parameters(), lr=0.05), nn.CrossEntropyLoss(),
                   config=cpu_config(**changes))


def test_throughput_and_start_up_are_reported_apart():
    log = LogConfig(progress_bar=False, warmup_steps=2)
    result = _trainer(SlowStart(), log=log).fit(tiny_loader(), epochs=2)  # 16 steps
    assert result.steady_steps == 14 and result.warmup_steps == 2
    assert result.startup_s >= 0.4 and result.first_batch_s is not None
    # the slow first step is start-up: the steady rate counts the 14 later steps over their own time
    steady_s = result.elapsed_s - result.startup_s
    assert result.samples_per_s == pytest.approx(14 * 8 / steady_s, rel=0.05)
    assert result.samples_per_s > result.overall_samples_per_s
    assert result.overall_samples_per_s == result.samples / result.elapsed_s
    text = format_summary(result)
    assert "(steady, 14 steps)" in text and "start-up 0." in text and "over 2 warm-up steps" in text


def test_validation_and_checkpoint_time_are_not_training_time(tmp_path, monkeypatch):
    log = LogConfig(progress_bar=False, warmup_steps=1)
    trainer = _trainer(tiny_model(), log=log, checkpoint=CheckpointConfig(dir=str(tmp_path), every_steps=2))
    real_evaluate = trainer.evaluate

    def slow_evaluate(loader):
        time.sleep(0.3)
        return real_evaluate(loader)

    monkeypatch.setattr(trainer, "evaluate", slow_evaluate)
    result = trainer.fit(tiny_loader(), epochs=2, val_loader=tiny_loader())
    assert result.elapsed_s > 0.6  # two slow validations happened ...
    steady_s = result.steady_steps * result.global_batch / result.samples_per_s
    assert steady_s < result.elapsed_s - 0.6  # ... outside the steady span


def test_a_run_shorter_than_the_warm_up_says_so():
    result = _trainer(tiny_model(), max_steps=2).fit(tiny_loader(), epochs=1)  # warm-up is 3 steps
    assert result.steady_steps == 0 and result.startup_s is None
    assert result.samples_per_s == result.overall_samples_per_s
    assert "(whole run: too few steps)" in format_summary(result)


class Unsized:
    """An iterable without ``__len__`` (a stream): 8 batches of 8 samples per pass."""

    def __iter__(self):
        data = tiny_data()
        for i in range(0, 64, 8):
            yield data.tensors[0][i:i + 8], data.tensors[1][i:i + 8]


def test_an_unsized_loader_stopped_by_max_steps_does_not_finish_its_epoch(tmp_path):
    evaluated = []
    trainer = _trainer(tiny_model(), max_steps=5, checkpoint=CheckpointConfig(dir=str(tmp_path)))
    real_evaluate = trainer.evaluate
    trainer.evaluate = lambda loader: evaluated.append(1) or real_evaluate(loader)
    result = trainer.fit(Unsized(), epochs=3, val_loader=tiny_loader())
    assert result.steps == 5 and result.epochs_completed == 0 and result.val_loss is None and evaluated == []
    progress = ckpt.load(ckpt.latest_checkpoint(tmp_path))["progress"]
    assert progress["epoch"] == 0 and progress["batch_in_epoch"] == 5


def test_an_unsized_loader_ends_its_epoch_when_the_iterator_is_exhausted():
    result = _trainer(tiny_model()).fit(Unsized(), epochs=2, val_loader=tiny_loader())
    assert result.steps == 16 and result.epochs_completed == 2 and result.val_loss is not None
