"""What a checkpoint holds reads back: extras ``weights_only`` would refuse are refused at save, a
resume that finds checkpoints but loads none stops with an error, a checksum catches changed bytes,
and prune clears crash leftovers (issue 36, items 2, 3, 8)."""

from __future__ import annotations

import os
import time
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


# ----------------------------------------------------------------- item 3: a checksum per checkpoint
def _save_marked(folder, step):
    """A checkpoint whose tensor data holds a pattern that can be found in the file's bytes."""
    marker = torch.arange(64, dtype=torch.float32) + step
    path = ckpt.checkpoint_path(folder, step)
    ckpt.atomic_save({"model": {"w": marker}, "step": step}, path)
    return path, marker


def _flip_tensor_bytes(path, marker):
    data = bytearray(path.read_bytes())
    at = data.find(marker.numpy().tobytes())
    assert at > 0
    data[at + 8: at + 48] = bytes(b ^ 0xFF for b in data[at + 8: at + 48])  # 40 bytes of tensor data
    path.write_bytes(bytes(data))


def test_a_checkpoint_gets_a_sha256sum_file(tmp_path):
    path, _ = _save_marked(tmp_path, 2)
    import hashlib

    assert ckpt.sidecar(path).read_text() == f"{hashlib.sha256(path.read_bytes()).hexdigest()}  {path.name}\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["step-00000002.pt", "step-00000002.pt.sha256"]


def test_flipped_tensor_bytes_are_caught_and_the_previous_checkpoint_used(tmp_path):
    _save_marked(tmp_path, 2)
    newest, marker = _save_marked(tmp_path, 4)
    _flip_tensor_bytes(newest, marker)
    with pytest.warns(RuntimeWarning, match=r"step-00000004\.pt does not load .*bytes changed.*moved it to "
                                            r"step-00000004\.pt\.corrupt"):
        path, state = ckpt.load_newest(tmp_path)
    assert path.name == "step-00000002.pt" and state["step"] == 2
    assert (tmp_path / "step-00000004.pt.corrupt").exists() and (tmp_path / "step-00000004.pt.corrupt.sha256").exists()
    with pytest.raises(ckpt.CheckpointChecksumError, match="bytes changed"):
        ckpt.load(tmp_path / "step-00000004.pt.corrupt")


def test_a_checkpoint_without_a_checksum_file_loads_as_before(tmp_path):
    path, marker = _save_marked(tmp_path, 2)
    ckpt.sidecar(path).unlink()
    found = ckpt.load_newest(tmp_path)
    assert found is not None and torch.equal(found[1]["model"]["w"], marker)


def test_prune_removes_the_checksum_files_of_what_it_removes(tmp_path):
    for step in (1, 2, 3):
        _save_marked(tmp_path, step)
    ckpt.prune(tmp_path, keep_last=1)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["step-00000003.pt", "step-00000003.pt.sha256"]


# ----------------------------------------------------------------- item 8: crash leftovers
def test_prune_removes_temp_files_whose_writer_died(tmp_path):
    import subprocess
    import sys

    child = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True,
                           text=True, check=True)  # exited and reaped: its pid is not alive
    dead_pid, live_pid = int(child.stdout), os.getppid()
    dead = tmp_path / f"step-00000004.pt.{dead_pid}-abcd1234.tmp"
    dead_sidecar = tmp_path / f"step-00000004.pt.sha256.{dead_pid}-abcd1234.tmp"
    live = tmp_path / f"step-00000005.pt.{live_pid}-abcd1234.tmp"
    fresh_dead = tmp_path / f"step-00000006.pt.{dead_pid}-abcd1234.tmp"  # might be another host's writer
    minutes_ago = time.time() - ckpt.DEAD_TMP_GRACE_S - 60  # far younger than STALE_TMP_S
    for p in (dead, dead_sidecar, live, fresh_dead):
        p.write_bytes(b"x")
    for p in (dead, dead_sidecar, live):
        os.utime(p, (minutes_ago, minutes_ago))
    assert sorted(ckpt.prune(tmp_path, keep_last=1)) == sorted([dead, dead_sidecar])
    assert live.exists() and fresh_dead.exists()
