"""Resume heals: an unreadable newest checkpoint is named, moved aside, and the next older one
used; writers sharing a folder never share a temp file; a failed save cleans up and says why."""

from __future__ import annotations

import errno
import threading

import pytest
import torch
from torch import nn

from gpudoctor.train import CheckpointConfig, Trainer
from gpudoctor.train import checkpoint as ckpt

from helpers_train import Recorder, cpu_config, tiny_loader, tiny_model


def _run(tmp, *, max_steps=None, epochs=2, every=4, model_seed=0):
    model, rec = tiny_model(seed=model_seed), Recorder()
    cfg = cpu_config(max_steps=max_steps, checkpoint=CheckpointConfig(dir=str(tmp), every_steps=every, keep_last=5))
    result = Trainer(model, torch.optim.SGD(model.parameters(), lr=0.05), nn.CrossEntropyLoss(), config=cfg,
                     observers=[rec]).fit(tiny_loader(), epochs=epochs)
    return model, rec, result


def _truncate(path):
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])


def _garbage(path):
    path.write_bytes(b"\x80\x04this is not a checkpoint" * 10)


def _empty(path):
    path.write_bytes(b"")


def _pickled_code(path):
    class Evil:
        def __reduce__(self):
            return (print, ("pwned",))

    torch.save({"model": Evil()}, path)


@pytest.mark.parametrize("damage", [_truncate, _garbage, _empty, _pickled_code])
def test_resume_skips_an_unreadable_newest_checkpoint(tmp_path, damage):
    _run(tmp_path, max_steps=8)  # saves at 4 and 8
    newest = ckpt.checkpoint_path(tmp_path, 8)
    damage(newest)
    with pytest.warns(RuntimeWarning, match=r"step-00000008\.pt does not load .*moved it to step-00000008\.pt\.corrupt"):
        _, rec, result = _run(tmp_path, max_steps=10, model_seed=7)
    assert result.resumed_from_step == 4 and [r.step for r in rec.records] == list(range(4, 10))
    assert (tmp_path / "step-00000008.pt.corrupt").exists()
    # the next restart does not trip over it again
    assert [p.name for p in ckpt.list_checkpoints(tmp_path)][-1] == "step-00000010.pt"


def test_resume_from_the_older_checkpoint_equals_the_uninterrupted_run(tmp_path):
    full_model, full, _ = _run(tmp_path / "full", epochs=2)
    _run(tmp_path / "cut", max_steps=8)
    _truncate(ckpt.checkpoint_path(tmp_path / "cut", 8))
    with pytest.warns(RuntimeWarning, match="does not load"):
        model, rec, result = _run(tmp_path / "cut", model_seed=9)
    assert result.resumed_from_step == 4 and rec.losses == full.losses[4:]
    assert all(torch.equal(a, b) for a, b in zip(full_model.parameters(), model.parameters()))


def test_checkpoints_that_all_fail_to_load_stop_the_resume_instead_of_restarting_at_step_0(tmp_path):
    _run(tmp_path, max_steps=8)  # saves at 4 and 8
    _garbage(ckpt.checkpoint_path(tmp_path, 8))
    _truncate(ckpt.checkpoint_path(tmp_path, 4))
    with pytest.raises(ckpt.CheckpointLoadError, match=r"(?s)2 checkpoint\(s\) .* none loads.*"
                       r"step-00000008\.pt: \w+Error.*step-00000004\.pt: .*move them out of the folder"):
        _run(tmp_path, max_steps=10)
    # nothing moved aside: the next restart stops here again instead of training from step 0
    assert [p.name for p in ckpt.list_checkpoints(tmp_path)] == ["step-00000004.pt", "step-00000008.pt"]


def test_two_writers_in_one_folder_use_their_own_temp_files(tmp_path, monkeypatch):
    real_save, names = torch.save, []
    both_writing = threading.Barrier(2, timeout=10)

    def slow_save(obj, f, *a, **k):
        names.append(f.name)
        both_writing.wait()  # both temp files are open at the same moment
        real_save(obj, f, *a, **k)

    monkeypatch.setattr(torch, "save", slow_save)
    target = ckpt.checkpoint_path(tmp_path, 1)
    errors = []

    def write(value):
        try:
            ckpt.atomic_save({"x": torch.tensor([value])}, target)
        except Exception as exc:  # noqa: BLE001 - collected for the assertion below
            errors.append(exc)

    threads = [threading.Thread(target=write, args=(v,)) for v in (1.0, 2.0)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == [] and len(set(names)) == 2
    assert all(".tmp" in n and f".{__import__('os').getpid()}-" in n for n in names)
    assert ckpt.load(target)["x"].item() in (1.0, 2.0) and list(tmp_path.glob("*.tmp")) == []


@pytest.mark.parametrize("err,why", [(errno.ENOSPC, "the disk is full"), (errno.EACCES, "permission denied"),
                                     (errno.EROFS, "the file system is read-only")])
def test_a_failed_save_removes_its_temp_file_and_says_why(tmp_path, monkeypatch, err, why):
    def failing_save(obj, f, *a, **k):
        f.write(b"partial")
        raise OSError(err, "simulated")

    monkeypatch.setattr(torch, "save", failing_save)
    with pytest.raises(ckpt.CheckpointSaveError, match=f"could not write checkpoint .*step-00000003.pt: {why}"):
        ckpt.atomic_save({"x": 1}, ckpt.checkpoint_path(tmp_path, 3))
    assert list(tmp_path.iterdir()) == []


def test_prune_leaves_another_writers_fresh_temp_file_alone(tmp_path):
    theirs = tmp_path / "step-00000005.pt.1-abcd1234.tmp"
    stale = tmp_path / "step-00000004.pt.2-abcd1234.tmp"
    theirs.write_bytes(b"x")
    stale.write_bytes(b"x")
    old = __import__("time").time() - ckpt.STALE_TMP_S - 10
    __import__("os").utime(stale, (old, old))
    assert ckpt.prune(tmp_path, keep_last=1) == [stale]
    assert theirs.exists()
