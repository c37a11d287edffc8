"""The keep-your-own-loop pieces: a loop written with them trains like the Trainer built on them."""

from __future__ import annotations

import torch
from torch import nn

from gpudoctor.train import Engine, Trainer
from gpudoctor.train import checkpoint as ckpt

from helpers_train import cpu_config, tiny_loader, tiny_model


def _sgd(params):
    return torch.optim.SGD(params, lr=0.05, momentum=0.9)


def test_own_loop_with_the_pieces_matches_the_trainer(tmp_path):
    cfg = cpu_config(grad_accum_steps=2)
    reference = tiny_model(dropout=0.0)
    Trainer(reference, _sgd(reference.parameters()), nn.CrossEntropyLoss(), config=cfg).fit(tiny_loader(), epochs=2)

    torch.manual_seed(0)
    engine = Engine(cfg)
    model, optimizer = engine.setup(tiny_model(dropout=0.0), _sgd)  # a params -> optimizer function
    loss_fn, accum, step = nn.CrossEntropyLoss(), cfg.grad_accum_steps, 0
    for _ in range(2):
        for i, (inputs, target) in enumerate(tiny_loader()):
            inputs, target = engine.to_device((inputs, target))
            last = (i + 1) % accum == 0
            with engine.no_sync(last_micro_step=last):
                loss = engine.forward_loss(loss_fn, inputs, target)
                assert loss.dtype == torch.float32 and loss.dim() == 0
                engine.backward(loss / accum)
            if last:
                assert engine.clip_and_step() is True
                step += 1
    for a, b in zip(reference.parameters(), model.parameters()):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)

    path = ckpt.checkpoint_path(tmp_path, step)
    engine.save(path, step=step)
    fresh = Engine(cfg)
    fresh_model, _ = fresh.setup(tiny_model(seed=5), _sgd)
    found = fresh.load_newest(tmp_path)
    assert found is not None and found[0] == path and found[1] == {"step": 8}
    assert all(torch.equal(a, b) for a, b in zip(model.parameters(), fresh_model.parameters()))
    assert fresh.optimizer.state_dict()["state"].keys() == optimizer.state_dict()["state"].keys()
    engine.close()
    fresh.close()


def test_pieces_before_setup_say_what_to_do():
    import pytest

    engine = Engine(cpu_config())
    with pytest.raises(ValueError, match=r"call engine.setup\(model, optimizer\) first"):
        engine.forward_loss(nn.CrossEntropyLoss(), torch.zeros(1, 8), torch.zeros(1, dtype=torch.long))
    engine.setup(tiny_model())
    with pytest.raises(ValueError, match="clip_and_step\\(\\) needs an optimizer"):
        engine.clip_and_step()
