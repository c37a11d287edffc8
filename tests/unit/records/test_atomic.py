"""records/atomic.py: the one atomic writer (fsync, a temp name of its own, nothing left behind)."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from gpudoctor.records import atomic
from gpudoctor.records.atomic import TMP_SUFFIX, atomic_file, temp_name, write_bytes_atomic, write_text_atomic
from gpudoctor.records.base import read_json, write_json
from gpudoctor.records.finding import Finding, Severity


def test_replaces_the_file_and_fsyncs_file_and_folder(tmp_path: Path, monkeypatch) -> None:
    synced: list[int] = []
    real = os.fsync
    monkeypatch.setattr(atomic.os, "fsync", lambda fd: (synced.append(fd), real(fd))[1])
    target = tmp_path / "findings.json"
    target.write_text("old", encoding="utf-8")
    write_text_atomic(target, "new ✓")
    assert target.read_text(encoding="utf-8") == "new ✓"
    assert len(synced) == 2  # the file's content, then the folder's entry
    assert sorted(p.name for p in tmp_path.iterdir()) == ["findings.json"]


def test_temp_names_are_unique_and_recognisable(tmp_path: Path) -> None:
    target = tmp_path / "report.html"
    names = {temp_name(target).name for _ in range(50)}
    assert len(names) == 50
    for name in names:
        assert name.startswith("report.html.") and TMP_SUFFIX.fullmatch(name.removeprefix("report.html"))
        assert f".{os.getpid()}-" in name


def test_a_failure_leaves_the_original_and_no_temp_file(tmp_path: Path) -> None:
    target = tmp_path / "step-00000001.pt"
    target.write_bytes(b"previous")
    with pytest.raises(RuntimeError, match="disk full"):
        with atomic_file(target) as handle:
            handle.write(b"half of a")
            raise RuntimeError("disk full")
    assert target.read_bytes() == b"previous"
    assert [p.name for p in tmp_path.iterdir()] == ["step-00000001.pt"]


def test_mode_is_applied_whatever_the_umask(tmp_path: Path) -> None:
    target = tmp_path / "script.py"
    old = os.umask(0o077)
    try:
        write_bytes_atomic(target, b"print(1)\n", mode=0o755)
    finally:
        os.umask(old)
    assert stat.S_IMODE(target.stat().st_mode) == 0o755


def test_write_json_goes_through_it(tmp_path: Path, monkeypatch) -> None:
    calls: list[Path] = []
    real = atomic.atomic_file
    monkeypatch.setattr(atomic, "atomic_file", lambda path, **kw: (calls.append(path), real(path, **kw))[1])
    finding = Finding(code="GD-TEST", severity=Severity.WARN, title="t", evidence=("1 ms",))
    write_json(tmp_path / "f.json", finding, kind="finding")
    assert calls == [tmp_path / "f.json"]
    assert read_json(tmp_path / "f.json", Finding, kind="finding") == finding
