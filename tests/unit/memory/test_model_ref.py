"""``memory estimate --model`` takes what ``tune --target`` takes: ``module:function`` (a module
in the current folder included, even from the console script) and ``path/to/file.py:function``."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from gpudoctor.errors import GpuDoctorUserError
from gpudoctor.memory.inputs import load_factory

SRC = Path(__file__).resolve().parents[3] / "src"
MODELS = """
import torch


def cnn():
    return torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.Flatten(), torch.nn.LazyLinear(2))


def mlp():
    return torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(3 * 8 * 8, 2))


NOT_CALLABLE = 3
"""


@pytest.fixture
def models_dir(tmp_path: Path, monkeypatch) -> Path:
    (tmp_path / "gd_test_models_here.py").write_text(MODELS, encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p not in ("", str(tmp_path))])
    yield tmp_path
    sys.modules.pop("gd_test_models_here", None)


def test_file_and_function(models_dir: Path) -> None:
    factory = load_factory("gd_test_models_here.py:mlp")
    assert factory().__class__.__name__ == "Sequential"
    assert load_factory(f"{models_dir / 'gd_test_models_here.py'}:cnn")().__class__.__name__ == "Sequential"


def test_module_in_the_current_folder(models_dir: Path) -> None:
    assert callable(load_factory("gd_test_models_here:cnn"))


@pytest.mark.parametrize(("ref", "words"), [
    ("resnet18", "MODULE:FUNCTION or path/to/file.py:FUNCTION"),
    ("no_such_module_xyz:f", "cannot import 'no_such_module_xyz'"),
    ("missing_file.py:f", "does not exist"),
    ("gd_test_models_here:nope", "has no 'nope'"),
    ("gd_test_models_here:NOT_CALLABLE", "is not callable"),
])
def test_errors_say_the_forms(models_dir: Path, ref: str, words: str) -> None:
    with pytest.raises(GpuDoctorUserError, match=words.replace("(", r"\(").replace(".", r"\.")):
        load_factory(ref)


def test_cli_finds_a_module_in_the_current_folder_without_it_on_sys_path(tmp_path: Path) -> None:
    """``python -P`` leaves the current folder off sys.path, as the installed console script does."""
    (tmp_path / "mymodels.py").write_text(MODELS, encoding="utf-8")
    env = dict(os.environ)
    env["PYTHONPATH"] = str(SRC)
    for ref in ("mymodels:mlp", "mymodels.py:mlp"):
        result = subprocess.run(
            [sys.executable, "-P", "-m", "gpudoctor", "memory", "estimate", "--model", ref, "--input",
             "image:3x8x8:2", "-b", "8", "--device", "cpu", "--probes", "2,4", "--json"],
            cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
        assert result.returncode == 0, result.stderr[-2000:]
        assert json.loads(result.stdout)["batch_size"] == 8
