"""The engine's OOM evidence (``robust.oom_snapshot``) with a stand-in for the CUDA allocator.

The CPU has no caching allocator, so these tests stand one in: the model raises the real
``torch.OutOfMemoryError`` and, like the CUDA allocator, first calls the OOM observers
(``memory_history._dispatch``); the snapshot it hands over records allocation stacks only while
history recording is on, as PyTorch's does. The files are written by the real ``OomDump``.
"""

from __future__ import annotations

import pickle
import warnings
from pathlib import Path

import pytest
import torch
from torch import nn

from gpudoctor.analysis.oom import UNKNOWN_SITE, top_sites
from gpudoctor.core import memory_history as mh
from gpudoctor.records.base import read_json
from gpudoctor.records.memory import OomSnapshot
from gpudoctor.train import CheckpointConfig, RobustConfig, Trainer, TrainConfig
from gpudoctor.train import oom as train_oom

from helpers_train import cpu_config, tiny_loader, tiny_model

GIB = 1 << 30
PLANTED = "/home/me/project/model.py:57 hold_activations"


class FakeAllocator:
    """History on/off, the snapshot (stacks only while recording) and the counters."""

    def __init__(self) -> None:
        self.recording = False
        self.starts = self.stops = 0

    def start(self, max_entries: int = 0) -> bool:
        self.recording, self.starts = True, self.starts + 1
        return True

    def stop(self) -> None:
        self.recording, self.stops = False, self.stops + 1

    def snapshot(self) -> dict:
        frames = [{"filename": "??", "line": 0, "name": "c10::cuda::CUDACachingAllocator::malloc"},
                  {"filename": "/home/me/project/model.py", "line": 57, "name": "hold_activations"},
                  {"filename": "/home/me/project/train.py", "line": 12, "name": "<module>"}]
        return {"segments": [{"device": 0, "stream": 0, "total_size": 6 * GIB, "blocks": [
            {"size": 5 * GIB, "state": "active_allocated", "frames": frames if self.recording else []},
            {"size": GIB, "state": "inactive", "frames": []},
        ]}]}

    @staticmethod
    def stats(device: int) -> dict:
        return {"inactive_split_bytes.all.current": 0, "num_alloc_retries": 1}


@pytest.fixture
def allocator(monkeypatch, tmp_path) -> FakeAllocator:
    fake = FakeAllocator()
    monkeypatch.chdir(tmp_path)  # relative oom_dir: the messages below are stable
    monkeypatch.setattr(train_oom, "_uses_cuda_allocator", lambda device: True)
    monkeypatch.setattr(mh, "history_enabled", lambda: fake.recording)
    monkeypatch.setattr(mh, "start_history", fake.start)
    monkeypatch.setattr(mh, "stop_history", fake.stop)

    def attach(out_dir, *, on_dump=None, rank=None, once=True, write_pickle=True):
        dump = mh.OomDump(out_dir, rank=rank, once=once, write_pickle=write_pickle, on_dump=on_dump,
                          snapshot_fn=fake.snapshot, stats_fn=fake.stats)
        mh._DUMPS.append(dump)
        return dump

    monkeypatch.setattr(mh, "attach_oom_dump", attach)
    return fake


class _OomAbove(nn.Module):
    """Runs out of memory for micro-batches above ``limit``, the way the CUDA allocator does:
    the observers see the failing request first, then the error is raised."""

    def __init__(self, limit: int, observers: bool = True) -> None:
        super().__init__()
        self.inner = tiny_model(dropout=0.0)
        self.limit, self.observers = limit, observers

    def forward(self, x):
        out = self.inner(x)
        if x.shape[0] > self.limit:
            if self.observers:
                mh._dispatch(0, 2 * GIB, 80 * GIB, GIB // 2)
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB. (simulated)")
        return out


def _fit(model, robust: RobustConfig, batch_size: int = 16, **changes):
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    cfg = cpu_config(robust=robust, **changes)
    return Trainer(model, opt, nn.CrossEntropyLoss(), config=cfg).fit(tiny_loader(batch_size=batch_size), epochs=1)


def _snap(path: str) -> OomSnapshot:
    return read_json(Path(path), OomSnapshot, kind=mh.KIND_OOM)


def test_default_arms_history_after_a_recovered_oom_and_dumps_the_repeat(allocator, golden) -> None:
    """on_oom: the first OOM writes the figures only (no stacks yet) and turns history on; the
    repeat OOM, at which the engine gives up, is written with its sites and the full snapshot."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with pytest.raises(torch.OutOfMemoryError) as err:
            _fit(_OomAbove(limit=4), RobustConfig(oom_recover=True, min_micro_batch=8, oom_dir="oom"))
    retry = [str(w.message) for w in caught if "retrying" in str(w.message)]
    assert len(retry) == 1 and "recording allocation history until step 100" in retry[0]
    assert "written: oom/oom-rank0.json;" in retry[0]  # the first OOM: figures, no pickle yet
    message = str(err.value)
    assert "gpudoctor memory show oom/oom-rank0.json" in message
    assert "oom/oom-snapshot-rank0.pickle (open it at pytorch.org/memory_viz)" in message
    golden("train/oom_messages.txt", "retry warning:\n" + retry[0] + "\n\nfinal error:\n" + message + "\n")

    snap = _snap("oom/oom-rank0.json")
    assert (snap.step, snap.requested_bytes, snap.reserved_bytes, snap.device_free_bytes) == (0, 2 * GIB, 6 * GIB,
                                                                                            GIB // 2)
    assert snap.pickle_path == "oom/oom-snapshot-rank0.pickle"
    assert top_sites(snap)[0].site == PLANTED
    with open("oom/oom-snapshot-rank0.pickle", "rb") as fh:
        assert pickle.load(fh)["segments"][0]["blocks"][0]["frames"]  # the full snapshot, with stacks
    assert (allocator.starts, allocator.stops, allocator.recording) == (1, 1, False)  # stopped at the end
    assert mh._DUMPS == []  # the observer left with fit


def test_history_window_ends_and_training_goes_on(allocator, monkeypatch) -> None:
    monkeypatch.setattr(train_oom, "HISTORY_STEPS", 2)
    with pytest.warns(RuntimeWarning, match="retrying"):
        result = _fit(_OomAbove(limit=4), RobustConfig(oom_recover=True))
    assert result.steps == 4 and result.micro_batch_split == 4
    # armed at the first OOM (step 0), still on for the repeat, stopped when step 2 started
    assert (allocator.starts, allocator.stops, allocator.recording) == (1, 1, False)
    snap = _snap("gpudoctor-oom/oom-rank0.json")  # no oom_dir, no checkpoint.dir: ./gpudoctor-oom
    assert top_sites(snap)[0].site == PLANTED and Path("gpudoctor-oom/oom-snapshot-rank0.pickle").is_file()


def test_always_records_from_the_start_and_notes_the_error(allocator) -> None:
    cfg = RobustConfig(oom_recover=False, oom_snapshot="always")
    with pytest.raises(torch.OutOfMemoryError, match="simulated") as err:
        _fit(_OomAbove(limit=4), cfg, checkpoint=CheckpointConfig(dir="ckpt"))
    notes = getattr(err.value, "__notes__", [])
    if hasattr(BaseException, "add_note"):  # Python 3.11+: the note is in the traceback
        assert notes and "gpudoctor memory show ckpt/oom-rank0.json" in notes[0]
    snap = _snap("ckpt/oom-rank0.json")  # checkpoint.dir when oom_dir is not set
    assert top_sites(snap)[0].site == PLANTED and snap.pickle_path == "ckpt/oom-snapshot-rank0.pickle"
    assert (allocator.starts, allocator.stops) == (1, 1)


def test_first_fatal_oom_still_writes_the_figures(allocator) -> None:
    """on_oom, no recovery: no stacks were recorded, but allocated/reserved/free are on disk."""
    with pytest.raises(torch.OutOfMemoryError):
        _fit(_OomAbove(limit=4), RobustConfig(oom_recover=False, oom_dir="oom"))
    snap = _snap("oom/oom-rank0.json")
    assert snap.allocated_bytes == 5 * GIB and snap.reserved_bytes == 6 * GIB and snap.pickle_path == ""
    assert [s.site for s in top_sites(snap)] == [UNKNOWN_SITE]
    assert not Path("oom/oom-snapshot-rank0.pickle").exists() and allocator.starts == 0


def test_someone_elses_history_is_used_and_left_alone(allocator) -> None:
    allocator.recording = True  # e.g. gpudoctor memory run, or the user's own recording
    with pytest.raises(torch.OutOfMemoryError):
        _fit(_OomAbove(limit=4), RobustConfig(oom_recover=False, oom_dir="oom"))
    assert _snap("oom/oom-rank0.json").pickle_path and allocator.recording
    assert (allocator.starts, allocator.stops) == (0, 0)


def test_off_writes_nothing(allocator) -> None:
    with pytest.raises(torch.OutOfMemoryError) as err:
        _fit(_OomAbove(limit=4), RobustConfig(oom_recover=False, oom_snapshot="off", oom_dir="oom"))
    assert not Path("oom").exists() and not getattr(err.value, "__notes__", [])


def test_without_an_observer_the_figures_come_from_the_counters(allocator, monkeypatch) -> None:
    """An allocator backend without OOM observers (cudaMallocAsync): the figures are read after the
    error, and the request's size from PyTorch's message."""
    monkeypatch.setattr(mh, "attach_oom_dump", lambda *a, **k: None)
    asked = {}

    def counters(device, *, requested_bytes, step=None):
        asked.update(device=device, requested=requested_bytes, step=step)
        return OomSnapshot(device=device, requested_bytes=requested_bytes, allocated_bytes=3 * GIB,
                           reserved_bytes=4 * GIB, device_free_bytes=GIB, device_total_bytes=80 * GIB, step=step)

    monkeypatch.setattr(mh, "allocator_snapshot_now", counters)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    with pytest.raises(torch.OutOfMemoryError):
        _fit(_OomAbove(limit=4, observers=False), RobustConfig(oom_recover=False, oom_dir="oom"))
    assert asked == {"device": 0, "requested": 2 * GIB, "step": 0}
    assert _snap("oom/oom-rank0.json").reserved_bytes == 4 * GIB


def test_on_the_cpu_nothing_is_written(monkeypatch, tmp_path) -> None:
    """The real gate: a CPU device has no caching allocator, so there is nothing to capture."""
    monkeypatch.chdir(tmp_path)
    with pytest.raises(torch.OutOfMemoryError):
        _fit(_OomAbove(limit=4, observers=False), RobustConfig(oom_recover=False))
    assert list(tmp_path.iterdir()) == []


def test_folder_choice() -> None:
    assert train_oom.oom_folder("runs/oom", "ckpt") == Path("runs/oom")
    assert train_oom.oom_folder(None, "ckpt") == Path("ckpt")
    assert train_oom.oom_folder(None, None) == Path("gpudoctor-oom")


# ---- the option ---------------------------------------------------------------------------------

def test_option_is_validated_with_the_fix() -> None:
    with pytest.raises(ValueError, match="robust.oom_snapshot='sometimes' is not valid; use one of: off, on_oom, always"):
        RobustConfig(oom_snapshot="sometimes")
    with pytest.raises(ValueError, match="robust.oom_dir='  ': give a folder path"):
        RobustConfig(oom_dir="  ")
    assert RobustConfig().oom_snapshot == "on_oom" and RobustConfig().oom_dir is None
    with pytest.raises(ValueError, match="unknown setting"):
        TrainConfig.from_dict({"robust": {"oom_snapshots": "always"}})


@pytest.mark.parametrize("suffix", [".toml", ".json"])
def test_option_round_trips_through_files(tmp_path, suffix) -> None:
    cfg = TrainConfig(robust=RobustConfig(oom_snapshot="always", oom_dir="runs/oom"))
    cfg.to_file(tmp_path / f"train{suffix}")
    assert TrainConfig.from_file(tmp_path / f"train{suffix}") == cfg
    default = TrainConfig()
    default.to_file(tmp_path / f"default{suffix}")
    assert TrainConfig.from_file(tmp_path / f"default{suffix}").robust.oom_snapshot == "on_oom"


def test_option_read_from_toml_text(tmp_path) -> None:
    (tmp_path / "t.toml").write_text('[robust]\noom_snapshot = "off"\noom_dir = "oom"\n', encoding="utf-8")
    assert TrainConfig.from_file(tmp_path / "t.toml").robust == RobustConfig(oom_snapshot="off", oom_dir="oom")


def test_the_suggested_memory_show_command_quotes_the_path(allocator) -> None:
    """oom_dir comes from the user's config: pasted into a shell, its path must stay one word."""
    with pytest.raises(torch.OutOfMemoryError) as err:
        _fit(_OomAbove(limit=4), RobustConfig(oom_recover=True, min_micro_batch=8,
                                              oom_dir="my runs; rm -rf x"))
    assert "gpudoctor memory show 'my runs; rm -rf x/oom-rank0.json'" in str(err.value)
