"""What a checkpoint holds reads back: extras ``weights_only`` would refuse are refused at save,
and a resume that finds checkpoints but loads none stops with an error (issue 36, item 2)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from gpudoctor.train import Engine
from gpudoctor.train import checkpoint as ckpt

from helpers_train import cpu_config, tiny_model


def _engine(seed=0):
    engine = Engine(cpu_config())
    engine.setup(tiny_model(seed=seed), lambda p: torch.optim.SGD(p, lr=0.1))
    return engine


def test_numpy_scalars_in_extras_are_saved_as_python_numbers_and_resume(tmp_path):
    engine = _engine()
    engine.save(ckpt.checkpoint_path(tmp_path, 3), best=np.float64(0.25), step=np.int64(3),
                flags={"done": np.bool_(True)}, history=[np.float32(1.5)])
    found = _engine(seed=4).load_newest(tmp_path)
    assert found is not None
    extra = found[1]
    assert extra == {"best": 0.25, "step": 3, "flags": {"done": True}, "history": [1.5]}
    assert type(extra["best"]) is float and type(extra["step"]) is int and type(extra["flags"]["done"]) is bool


@pytest.mark.parametrize("value,where,hint", [
    (Path("runs/a"), r"out\b", r"str\(\.\.\.\)"),
    ({"dirs": [Path("x")]}, r"out\['dirs'\]\[0\]", r"str\(\.\.\.\)"),
    (np.zeros(3), "out", r"torch\.from_numpy"),
    (object(), "out", "plain data"),
])
def test_extras_that_weights_only_cannot_read_are_refused_at_save(tmp_path, value, where, hint):
    engine = _engine()
    path = ckpt.checkpoint_path(tmp_path, 1)
    with pytest.raises(TypeError, match=rf"checkpoint extra {where}.*weights_only=True.*{hint}"):
        engine.save(path, out=value)
    assert not path.exists()


def test_the_allow_list_matches_what_weights_only_reads(tmp_path):
    extra = {"t": torch.ones(2), "n": (1, 2.5, 1 + 2j, "s", b"b", None, True), "d": torch.float16,
             "dev": torch.device("cpu"), "size": torch.Size([2, 3]), "set": {1, 2}}
    path = tmp_path / "x.pt"
    torch.save(ckpt.plain_extras(extra), path)
    back = torch.load(path, weights_only=True)
    assert back["n"] == extra["n"] and back["d"] is torch.float16 and back["set"] == {1, 2}


def test_a_resume_that_loads_none_of_the_checkpoints_found_raises_naming_each(tmp_path):
    engine = _engine()
    for step in (2, 4):
        engine.save(ckpt.checkpoint_path(tmp_path, step), step=step)
        ckpt.checkpoint_path(tmp_path, step).write_bytes(b"not a checkpoint")
    with pytest.raises(ckpt.CheckpointLoadError, match=r"(?s)step-00000004\.pt: .*step-00000002\.pt: "):
        _engine().load_newest(tmp_path)
    assert len(ckpt.list_checkpoints(tmp_path)) == 2  # nothing moved: a restart stops here again
    assert _engine().load_newest(tmp_path / "empty") is None  # no checkpoints at all: a fresh start
