"""The OOM dump's files (``OomDump`` fed a snapshot shaped like PyTorch's) and ``gpudoctor memory show``."""

from __future__ import annotations

import io
import json
import pickle
from pathlib import Path

import pytest
from rich.console import Console
from typer.testing import CliRunner

from gpudoctor.analysis.oom import explain_oom, top_sites
from gpudoctor.cli.app import app
from gpudoctor.core import memory_history as mh
from gpudoctor.records.base import read_json, write_json
from gpudoctor.records.memory import LiveBlock, OomSnapshot
from gpudoctor.report.memory_view import render_oom_snapshot

GIB, MIB = 1 << 30, 1 << 20


def _frames(*sites: tuple[str, int, str]) -> list[dict]:
    return [{"filename": f, "line": n, "name": name} for f, n, name in sites]


# the shape of torch.cuda.memory._snapshot() with history on, trimmed to the keys gpudoctor reads
SNAPSHOT = {"segments": [
    {"device": 0, "stream": 0, "total_size": 70 * GIB, "blocks": [
        {"size": 48 * GIB, "state": "active_allocated", "frames": _frames(
            ("/usr/lib/python3/site-packages/torch/nn/functional.py", 2100, "gelu"),
            ("/home/me/gpt/model.py", 88, "forward"), ("/home/me/gpt/train.py", 140, "train_step"))},
        {"size": 12 * GIB, "state": "active_allocated", "frames": _frames(
            ("/home/me/gpt/model.py", 61, "forward"), ("/home/me/gpt/train.py", 140, "train_step"))},
        {"size": 6 * GIB, "state": "active_allocated", "frames": _frames(
            ("/usr/lib/python3/site-packages/torch/optim/adamw.py", 180, "_init_group"),
            ("/home/me/gpt/train.py", 152, "train_step"))},
        {"size": 4 * GIB, "state": "inactive", "frames": []},
    ]},
]}


def _stats(device: int) -> dict:
    return {"inactive_split_bytes.all.current": 300 * MIB, "num_alloc_retries": 2}


def test_dump_writes_the_rank_files_and_keeps_the_step(tmp_path) -> None:
    dump = mh.OomDump(tmp_path / "oom", rank=3, once=False, snapshot_fn=lambda: SNAPSHOT, stats_fn=_stats)
    dump.step = 41
    dump(0, 16 * GIB, 140 * GIB, 2 * GIB)  # as the allocator calls it: device, request, total, free
    snap = read_json(tmp_path / "oom" / "oom-rank3.json", OomSnapshot, kind=mh.KIND_OOM)
    assert (snap.step, snap.requested_bytes, snap.allocated_bytes, snap.reserved_bytes) == (41, 16 * GIB, 66 * GIB,
                                                                                          70 * GIB)
    assert (snap.device_free_bytes, snap.device_total_bytes, snap.alloc_retries) == (2 * GIB, 140 * GIB, 2)
    assert snap.pickle_path == str(tmp_path / "oom" / "oom-snapshot-rank3.pickle")
    with open(snap.pickle_path, "rb") as fh:
        assert pickle.load(fh) == SNAPSHOT  # the untouched snapshot, for PyTorch's viewer
    dump.step = 42
    dump(0, 8 * GIB, 140 * GIB, 2 * GIB)  # once=False: the last OOM wins
    assert read_json(dump.json_path, OomSnapshot, kind=mh.KIND_OOM).step == 42 and dump.dumps == 2


def test_dump_once_and_without_pickle(tmp_path) -> None:
    dump = mh.OomDump(tmp_path, write_pickle=False, snapshot_fn=lambda: SNAPSHOT, stats_fn=_stats)
    dump(0, GIB, 140 * GIB, 0)
    dump(0, 2 * GIB, 140 * GIB, 0)
    assert dump.dumps == 1 and read_json(tmp_path / "oom.json", OomSnapshot, kind=mh.KIND_OOM).requested_bytes == GIB
    assert not (tmp_path / "oom-snapshot.pickle").exists()


def test_dump_never_raises_into_the_allocator(tmp_path) -> None:
    def broken():
        raise RuntimeError("snapshot failed")

    dump = mh.OomDump(tmp_path, snapshot_fn=broken, stats_fn=_stats)
    dump(0, GIB, 140 * GIB, 0)  # must not raise: the OOM error has to stay the error
    assert dump.error == "RuntimeError: snapshot failed" and dump.dumps == 0


def test_detached_dumps_are_not_called(tmp_path) -> None:
    dump = mh.OomDump(tmp_path, snapshot_fn=lambda: SNAPSHOT, stats_fn=_stats)
    mh._DUMPS.append(dump)
    dump.detach()
    mh._dispatch(0, GIB, 140 * GIB, 0)
    assert dump.dumps == 0 and dump not in mh._DUMPS


def test_file_names_and_finding_them(tmp_path) -> None:
    assert mh.oom_file_names() == ("oom.json", "oom-snapshot.pickle")
    assert mh.oom_file_names(2) == ("oom-rank2.json", "oom-snapshot-rank2.pickle")
    for name in ("oom-rank10.json", "oom-rank2.json", "oom.json", "oom-rank2.json.tmp", "steps-rank0.jsonl"):
        (tmp_path / name).write_text("{}", encoding="utf-8")
    assert [p.name for p in mh.find_oom_files(tmp_path)] == ["oom.json", "oom-rank2.json", "oom-rank10.json"]
    assert mh.find_oom_files(tmp_path / "oom.json") == [tmp_path / "oom.json"]
    with pytest.raises(FileNotFoundError, match="robust.oom_snapshot"):
        mh.find_oom_files(_empty(tmp_path))
    with pytest.raises(FileNotFoundError, match="no such file or folder"):
        mh.find_oom_files(tmp_path / "missing")


def _empty(tmp_path: Path) -> Path:
    (tmp_path / "empty").mkdir()
    return tmp_path / "empty"


@pytest.mark.parametrize("text,expected", [
    ("CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity", 2 * GIB),
    ("Tried to allocate 20.00 MiB (GPU 0; 79.10 GiB total capacity", 20 * MIB),
    ("DefaultCPUAllocator: not enough memory", None),
])
def test_requested_size_from_the_message(text, expected) -> None:
    assert mh.requested_from_message(text) == expected


# ---- gpudoctor memory show ---------------------------------------------------------------------

def _engine_files(folder: Path, rank: int = 0, *, stacks: bool = True) -> Path:
    """What the engine writes at an OOM (figures, live blocks, the pickle beside the JSON)."""
    dump = mh.OomDump(folder, rank=rank, once=False, write_pickle=stacks, stats_fn=_stats,
                      snapshot_fn=(lambda: SNAPSHOT) if stacks else (lambda: _without_frames(SNAPSHOT)))
    dump.step = 412
    dump(0, 16 * GIB, 140 * GIB, 512 * MIB)
    return dump.json_path


def _without_frames(snapshot: dict) -> dict:
    return {"segments": [dict(s, blocks=[dict(b, frames=[]) for b in s["blocks"]]) for s in snapshot["segments"]]}


def _render(path: Path) -> str:
    snap = read_json(path, OomSnapshot, kind=mh.KIND_OOM)
    buf = io.StringIO()
    pickle_path = str(path.parent / Path(snap.pickle_path).name) if snap.pickle_path else ""
    Console(file=buf, width=100, color_system=None).print(render_oom_snapshot(
        snap, top_sites(snap, limit=10), explain_oom(snap), source=str(path), pickle_path=pickle_path))
    return buf.getvalue()


def test_show_golden_with_sites(tmp_path, monkeypatch, golden) -> None:
    monkeypatch.chdir(tmp_path)
    golden("memory/memory_show_oom.txt", _render(_engine_files(Path("ckpt"))))


def test_show_golden_without_stacks(tmp_path, monkeypatch, golden) -> None:
    monkeypatch.chdir(tmp_path)
    golden("memory/memory_show_oom_no_stacks.txt", _render(_engine_files(Path("ckpt"), stacks=False)))


def test_show_fragmentation_verdict(tmp_path) -> None:
    snap = OomSnapshot(device=0, requested_bytes=2 * GIB, allocated_bytes=60 * GIB, reserved_bytes=70 * GIB,
                       device_free_bytes=0, device_total_bytes=80 * GIB,
                       blocks=(LiveBlock(size_bytes=60 * GIB, frames=("train.py:9 step",)),))
    write_json(tmp_path / "oom.json", snap, kind=mh.KIND_OOM)
    text = _render(tmp_path / "oom.json")
    assert "GD-OOM-FRAGMENTATION" in text and "expandable_segments:True" in text
    assert "No full snapshot" in text


def test_show_cli_on_a_folder_of_ranks(tmp_path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    _engine_files(Path("run"), rank=1)
    _engine_files(Path("run"), rank=0, stacks=False)
    result = CliRunner().invoke(app, ["memory", "show", "run", "--json"])
    assert result.exit_code == 0, result.output
    shown = json.loads(result.stdout)["snapshots"]
    assert [s["path"] for s in shown] == ["run/oom-rank0.json", "run/oom-rank1.json"]
    assert shown[0]["pickle"] == "" and shown[1]["pickle"] == "run/oom-snapshot-rank1.pickle"
    assert "pytorch.org/memory_viz" in shown[1]["viewer"]
    top = shown[1]["sites"][0]
    assert top["site"] == "/home/me/gpt/model.py:88 forward" and top["bytes"] == 48 * GIB
    assert shown[1]["figures"]["step"] == 412 and shown[1]["live_blocks"] == 3
    assert shown[1]["findings"][0]["code"] == "GD-OOM-SHORTAGE"
    text = CliRunner().invoke(app, ["memory", "show", "run/oom-rank1.json"])
    assert text.exit_code == 0 and "Out of memory on GPU 0 at step 412" in text.stdout


def test_show_cli_finds_the_pickle_beside_a_moved_json(tmp_path, monkeypatch) -> None:
    """The recorded pickle path is relative to where training ran; the pickle sits beside its JSON."""
    monkeypatch.chdir(tmp_path)
    _engine_files(Path("ckpt"))
    Path("ckpt").rename("copied")
    result = CliRunner().invoke(app, ["memory", "show", "copied/oom-rank0.json", "--json"])
    assert json.loads(result.stdout)["snapshots"][0]["pickle"] == "copied/oom-snapshot-rank0.pickle"


def test_show_cli_bad_input(tmp_path) -> None:
    missing = CliRunner().invoke(app, ["memory", "show", str(tmp_path / "nothing")])
    assert missing.exit_code == 2 and "no such file or folder" in missing.output
    (tmp_path / "oom.json").write_text('{"schema_version": 1, "kind": "steps", "data": {}}', encoding="utf-8")
    wrong = CliRunner().invoke(app, ["memory", "show", str(tmp_path / "oom.json")])
    assert wrong.exit_code == 2 and "expected 'oom_snapshot'" in wrong.output
