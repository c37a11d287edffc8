"""The core install has no torch: lint, explain, diagnose and report work without it, and every
command that needs torch exits 2 naming the extra and how to pick a CPU-only or older-CUDA wheel.

torch is installed here, so each test runs gpudoctor in a subprocess whose ``sitecustomize``
makes ``import torch`` raise ModuleNotFoundError (and ``find_spec("torch")`` find nothing), as
on a machine where it was never installed. Subprocesses it starts inherit the block.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[3] / "src"
FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"

BLOCK = '''
import sys

class _NoTorch:
    """A finder that says torch does not exist."""

    def find_spec(self, name, path=None, target=None):
        if name == "torch" or name.startswith("torch."):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None

sys.meta_path.insert(0, _NoTorch())
'''


@pytest.fixture(scope="module")
def no_torch(tmp_path_factory) -> dict[str, str]:
    site = tmp_path_factory.mktemp("no_torch_site")
    (site / "sitecustomize.py").write_text(BLOCK, encoding="utf-8")
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(site), str(SRC)])
    env["COLUMNS"] = "100"
    probe = subprocess.run([sys.executable, "-c", "import torch"], env=env, capture_output=True, text=True)
    assert probe.returncode == 1 and "No module named 'torch'" in probe.stderr
    return env


def _gd(env: dict[str, str], *args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    result = subprocess.run([sys.executable, "-m", "gpudoctor", *args], env=env, cwd=cwd,
                            capture_output=True, text=True, timeout=120)
    assert "Traceback" not in result.stderr, result.stderr
    return result


def test_lint_runs_without_torch(no_torch) -> None:
    bad = FIXTURES / "lint" / "GD101" / "bad.py"
    result = _gd(no_torch, "lint", "--isolated", str(bad))
    assert result.returncode == 1, result.stderr
    assert "GD101" in result.stdout


def test_lint_fix_runs_without_torch(no_torch, tmp_path) -> None:
    """--fix needs libcst, a core dependency, and no torch."""
    target = tmp_path / "train.py"
    shutil.copy(FIXTURES / "lint" / "GD101" / "bad.py", target)
    result = _gd(no_torch, "lint", "--isolated", "--diff", str(target))
    assert result.returncode in (0, 1), result.stderr


def test_explain_runs_without_torch(no_torch) -> None:
    result = _gd(no_torch, "explain", "RuntimeError: CUDA error: device-side assert triggered")
    assert result.returncode == 1, result.stderr  # a known failure matched: a finding
    assert "device-side assert" in result.stdout.lower()


def test_diagnose_of_a_recorded_run_runs_without_torch(no_torch, tmp_path) -> None:
    run = tmp_path / "basic_user"
    shutil.copytree(FIXTURES / "runs" / "basic_user", run)
    result = _gd(no_torch, "diagnose", str(run))
    assert result.returncode == 1, result.stderr  # the recorded run has a WARN finding
    assert "DataLoader" in result.stdout
    assert _gd(no_torch, "diagnose", "--fail-on", "error", str(run)).returncode == 0


def test_report_of_a_recorded_run_runs_without_torch(no_torch, tmp_path) -> None:
    run = tmp_path / "basic_user"
    shutil.copytree(FIXTURES / "runs" / "basic_user", run)
    result = _gd(no_torch, "report", str(run), "-o", str(tmp_path / "r.html"))
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "r.html").stat().st_size > 10_000


@pytest.mark.parametrize(
    ("command", "args"),
    [
        ("run", ["run", "--", sys.executable, "-c", "pass"]),
        ("doctor", ["doctor", "--no-try"]),
        ("memory estimate", ["memory", "estimate", "--model", "m:f", "--input", "image:3x8x8:2", "-b", "4"]),
        ("memory run", ["memory", "run", "--", sys.executable, "-c", "pass"]),
        ("tune", ["tune", "batch", "--target", "m:f"]),
        ("bench", ["bench", "matmul", "--quick"]),
    ],
)
def test_torch_commands_exit_2_naming_the_extra(no_torch, tmp_path, command: str, args: list[str]) -> None:
    result = _gd(no_torch, *args, cwd=tmp_path)
    assert result.returncode == 2, (result.stdout, result.stderr)
    message = " ".join(result.stderr.split())
    assert f"`gpudoctor {command}` needs PyTorch" in message
    assert "pip install 'gpudoctor[torch]'" in message
    assert "--index-url https://download.pytorch.org/whl/cpu" in message
    assert not any(tmp_path.iterdir()), "nothing may be written before the torch check"


def test_help_of_torch_commands_works_without_torch(no_torch) -> None:
    for args in (["run", "-h"], ["doctor", "--help"], ["memory", "estimate", "-h"], ["tune", "-h"]):
        result = _gd(no_torch, *args)
        assert result.returncode == 0 and "Usage:" in result.stdout, (args, result.stderr)
