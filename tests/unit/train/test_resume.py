"""Checkpoints: a resumed run equals the uninterrupted one bit for bit; atomic writes; keep-last-K."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from gpudoctor.train import CheckpointConfig, Trainer, fast_loader
from gpudoctor.train import checkpoint as ckpt

from helpers_train import Recorder, cpu_config, tiny_data, tiny_model


def _run(tmp, *, max_steps=None, epochs=3, every=None, model_seed=0):
    model = tiny_model(seed=model_seed)
    opt = torch.optim.AdamW(model.parameters(), lr=0.01)
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=5, gamma=0.5)
    rec = Recorder()
    cfg = cpu_config(max_steps=max_steps, checkpoint=CheckpointConfig(dir=str(tmp) if tmp else None,
                                                                        every_steps=every, keep_last=2))
    # a shuffling loader (seeded sampler, one worker-less process) with a 10-batch epoch
    loader = fast_loader(tiny_data(80), 8, num_workers=0, seed=3)
    result = Trainer(model, opt, nn.CrossEntropyLoss(), config=cfg, scheduler=sched, observers=[rec]).fit(
        loader, epochs=epochs)
    return model, rec, result


@pytest.mark.parametrize("stop_at", [7, 10, 13])
def test_resume_is_bit_exact(tmp_path, stop_at):
    full_model, full, _ = _run(None)
    _, first, r1 = _run(tmp_path, max_steps=stop_at)
    assert r1.steps == stop_at and "max_steps" in r1.stopped_reason
    # a different initial model proves the weights come from the checkpoint
    resumed_model, second, r2 = _run(tmp_path, model_seed=99)
    assert r2.resumed_from_step == stop_at and r2.steps == 30
    assert first.losses + second.losses == full.losses
    for a, b in zip(full_model.parameters(), resumed_model.parameters()):
        assert torch.equal(a, b)


def test_keep_last_k_and_periodic_saves(tmp_path):
    _run(tmp_path, every=4, epochs=2)  # 20 steps: saves at 4, 8, 12, 16, 20 (+ the final one)
    names = [p.name for p in ckpt.list_checkpoints(tmp_path)]
    assert names == ["step-00000016.pt", "step-00000020.pt"]


def test_crash_mid_write_leaves_previous_checkpoint_readable(tmp_path, monkeypatch):
    ckpt.atomic_save({"x": torch.tensor([1.0])}, ckpt.checkpoint_path(tmp_path, 1))
    real_save = torch.save

    def dying_save(obj, f, *a, **k):
        real_save(obj, f, *a, **k)
        f.write(b"half")
        raise KeyboardInterrupt("killed while writing")

    monkeypatch.setattr(torch, "save", dying_save)
    with pytest.raises(KeyboardInterrupt):
        ckpt.atomic_save({"x": torch.tensor([2.0])}, ckpt.checkpoint_path(tmp_path, 2))
    monkeypatch.undo()
    assert [p.name for p in ckpt.list_checkpoints(tmp_path)] == ["step-00000001.pt"]
    assert ckpt.load(ckpt.latest_checkpoint(tmp_path))["x"].item() == 1.0
    assert list(tmp_path.glob("*.tmp")) == []  # the failed save removed its own temp file


def test_module_prefix_handled_both_ways():
    bare = tiny_model()
    wrapped_state = {"module." + k: v for k, v in bare.state_dict().items()}
    target = tiny_model(seed=5)
    ckpt.load_model_state(target, wrapped_state)
    assert all(torch.equal(a, b) for a, b in zip(bare.parameters(), target.parameters()))
    compiled_ddp_state = {"_orig_mod.module." + k: v for k, v in bare.state_dict().items()}
    assert ckpt.strip_prefixes(compiled_ddp_state).keys() == bare.state_dict().keys()


def test_checkpoint_refuses_pickled_code(tmp_path):
    class Evil:
        def __reduce__(self):
            return (print, ("pwned",))

    path = tmp_path / "step-00000001.pt"
    torch.save({"x": Evil()}, path)
    with pytest.raises(Exception, match="[Ww]eights only"):
        ckpt.load(path)
