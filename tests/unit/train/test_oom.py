"""OOM recovery: a real ``torch.OutOfMemoryError`` from a step halves the micro-batch, keeps the batch."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from gpudoctor.train import RobustConfig, Trainer

from helpers_train import Recorder, cpu_config, plain_loop, tiny_loader, tiny_model


class _OomAbove(nn.Module):
    """Raises the real ``torch.OutOfMemoryError`` whenever a micro-batch exceeds ``limit`` samples."""

    def __init__(self, limit: int) -> None:
        super().__init__()
        self.inner = tiny_model(dropout=0.0)
        self.limit = limit

    def forward(self, x):
        out = self.inner(x)  # part of the graph is built before the allocation fails, as in real life
        if x.shape[0] > self.limit:
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB (simulated)")
        return out


def test_oom_halves_micro_batch_and_keeps_the_effective_batch():
    reference = tiny_model(dropout=0.0)
    plain_loop(reference, tiny_loader(batch_size=16), epochs=1)
    model, rec = _OomAbove(limit=4), Recorder()
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    with pytest.warns(RuntimeWarning, match="retrying with micro-batch"):
        result = Trainer(model, opt, nn.CrossEntropyLoss(), config=cpu_config(), observers=[rec]).fit(
            tiny_loader(batch_size=16), epochs=1)
    assert result.micro_batch_split == 4 and result.global_batch == 16 and result.steps == 4
    assert [r.micro_steps for r in rec.records] == [4, 4, 4, 4]
    for a, b in zip(reference.parameters(), model.inner.parameters()):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)


def test_oom_gives_up_below_min_micro_batch():
    model = _OomAbove(limit=0)
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    cfg = cpu_config(robust=RobustConfig(min_micro_batch=4))
    with pytest.warns(RuntimeWarning), pytest.raises(torch.OutOfMemoryError, match="min_micro_batch"):
        Trainer(model, opt, nn.CrossEntropyLoss(), config=cfg).fit(tiny_loader(batch_size=16), epochs=1)


def test_oom_recovery_can_be_turned_off():
    model = _OomAbove(limit=4)
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    cfg = cpu_config(robust=RobustConfig(oom_recover=False))
    with pytest.raises(torch.OutOfMemoryError, match="simulated"):
        Trainer(model, opt, nn.CrossEntropyLoss(), config=cfg).fit(tiny_loader(batch_size=16), epochs=1)


def test_split_uses_the_observed_batch_when_the_loader_has_no_batch_size() -> None:
    """A list of ready-made batches has no ``batch_size``: the failed batch's size decides
    (this was first seen on an H200, where the real CUDA OOM test gave "a micro-batch of 0")."""
    from gpudoctor.train.oom import MicroBatchSplit

    split = MicroBatchSplit(None, min_micro_batch=1)
    with pytest.warns(RuntimeWarning, match="retrying with micro-batch 32"):
        split.halve(64)
    assert split.split == 2
    with pytest.raises(torch.OutOfMemoryError, match="micro-batch of 0 samples"):
        MicroBatchSplit(None, min_micro_batch=1).halve()  # nothing known: give up, say so


def test_oom_recovery_on_a_list_of_ready_made_batches() -> None:
    """The path the H200 test took: batches with no DataLoader (so no batch_size) still split."""
    batches = [(x, y) for x, y in tiny_loader(batch_size=16, n=64)]
    model = _OomAbove(limit=4)
    with pytest.warns(RuntimeWarning, match="retrying"):
        result = Trainer(model, torch.optim.SGD(model.parameters(), lr=0.1), nn.CrossEntropyLoss(),
                         config=cpu_config(robust=RobustConfig(oom_recover=True))).fit(batches, epochs=1)
    assert result.micro_batch_split == 4 and result.steps == 4


def test_flop_count_runs_on_a_few_samples_so_a_batch_near_the_limit_cannot_fail_it():
    # on CUDA the first step counts FLOPs before training: on the whole batch, a batch the OOM
    # recovery would have split failed there first and ended the run
    import gpudoctor.train.engine as engine

    model = _OomAbove(limit=engine.FLOP_SAMPLES)
    trainer = Trainer(model, torch.optim.SGD(model.parameters(), lr=0.1), nn.CrossEntropyLoss(),
                      config=cpu_config())
    batch = (torch.randn(64, 8), torch.randint(0, 3, (64,)))
    per_sample = trainer.engine.count_flops(trainer.loss_fn, trainer.unpack, batch)
    assert all(p.grad is None for p in model.parameters())  # the counting pass leaves no gradients
    whole = engine.count_flops(lambda: nn.functional.cross_entropy(model.inner(batch[0]), batch[1]).backward())
    assert per_sample == pytest.approx(whole / 64)


def test_flop_count_that_runs_out_of_memory_leaves_mfu_unknown(monkeypatch):
    import gpudoctor.train.engine as engine

    def oom(run):
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 1.00 GiB (simulated)")

    monkeypatch.setattr(engine, "count_flops", oom)
    model = tiny_model(dropout=0.0)
    trainer = Trainer(model, torch.optim.SGD(model.parameters(), lr=0.1), nn.CrossEntropyLoss(),
                      config=cpu_config())
    batch = (torch.randn(16, 8), torch.randint(0, 3, (16,)))
    assert trainer.engine.count_flops(trainer.loss_fn, trainer.unpack, batch) is None
