"""``--out``: a new directory, or an earlier gpudoctor run with ``--force``; nothing else touched."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpudoctor.collectors.outdir import claim
from gpudoctor.errors import GpuDoctorUserError


def _run_dir(path: Path) -> None:
    path.mkdir(parents=True)
    for name in ("manifest.json", "steps-rank0.jsonl", "config-rank0.json", "stdout.log", "stacks-rank1.txt"):
        (path / name).write_text("x")


def test_new_or_empty_directory_is_taken(tmp_path: Path) -> None:
    claim(tmp_path / "new")
    (tmp_path / "empty").mkdir()
    claim(tmp_path / "empty")
    assert not (tmp_path / "new").exists()  # claiming creates nothing


def test_a_file_is_refused(tmp_path: Path) -> None:
    (tmp_path / "f").write_text("mine")
    with pytest.raises(GpuDoctorUserError, match="that is a file"):
        claim(tmp_path / "f", force=True)
    assert (tmp_path / "f").read_text() == "mine"


def test_an_earlier_run_needs_force_and_is_then_emptied(tmp_path: Path) -> None:
    _run_dir(tmp_path / "rd")
    with pytest.raises(GpuDoctorUserError, match="--force"):
        claim(tmp_path / "rd")
    assert len(list((tmp_path / "rd").iterdir())) == 5
    claim(tmp_path / "rd", force=True)
    assert list((tmp_path / "rd").iterdir()) == []


def test_a_try_run_with_baseline_and_try_is_replaced_with_force(tmp_path: Path) -> None:
    _run_dir(tmp_path / "rd" / "baseline")
    _run_dir(tmp_path / "rd" / "try")
    claim(tmp_path / "rd", force=True)
    assert list((tmp_path / "rd").iterdir()) == []


@pytest.mark.parametrize("theirs", ["stdout.log", "train.py", "baseline/notes.txt", "ckpt/model.pt"])
def test_anyone_elses_file_refuses_even_with_force(tmp_path: Path, theirs: str) -> None:
    if theirs == "stdout.log":  # a user's log beside their script: our file name, but no run
        (tmp_path / "rd").mkdir()
    else:
        _run_dir(tmp_path / "rd")
        if theirs.startswith("baseline"):
            _run_dir(tmp_path / "rd" / "baseline")
    target = tmp_path / "rd" / theirs
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text("mine")
    before = sorted(p.relative_to(tmp_path) for p in (tmp_path / "rd").rglob("*"))
    with pytest.raises(GpuDoctorUserError, match="nothing was touched"):
        claim(tmp_path / "rd", force=True)
    assert sorted(p.relative_to(tmp_path) for p in (tmp_path / "rd").rglob("*")) == before
    assert target.read_text() == "mine"
