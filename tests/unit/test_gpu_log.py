"""``pytest --gpu-log DIR`` writes a log of the session to commit beside the GPU figures."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

SAMPLE = """
import pytest

def test_prints_a_figure():
    print("bf16 matmul 799.3 TFLOP/s")

def test_fails():
    assert 1 + 1 == 3, "arithmetic"

@pytest.mark.skip(reason="needs 2 GPUs")
def test_two_gpus():
    pass
"""


def test_the_log_names_outcomes_output_and_failures(tmp_path: Path) -> None:
    tests = tmp_path / "tests"
    tests.mkdir()
    (tests / "conftest.py").write_text((ROOT / "tests" / "conftest.py").read_text(encoding="utf-8"),
                                       encoding="utf-8")
    (tests / "support").symlink_to(ROOT / "tests" / "support")
    (tests / "test_sample.py").write_text(SAMPLE, encoding="utf-8")
    logs = tmp_path / "logs"
    for _ in range(2):
        result = subprocess.run(
            [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
             "--rootdir", str(tmp_path), "--gpu-log", str(logs), str(tests)],
            cwd=tmp_path, capture_output=True, text=True, timeout=120, check=False)
        assert result.returncode == 1, result.stdout + result.stderr
    written = sorted(logs.glob("pytest-gpu-*gpu-*.txt"))
    assert len(written) == 2  # a second session never overwrites the first log
    assert f"GPU test log: {written[-1]}" in result.stdout or f"GPU test log: {written[0]}" in result.stdout
    text = written[0].read_text(encoding="utf-8")
    assert text.startswith("# gpudoctor GPU test log\ncommand: ")
    assert "result: 1 failed, 1 passed, 1 skipped in " in text and "(pytest exit status 1)" in text
    assert "PASSED   " in text and "test_sample.py::test_prints_a_figure" in text
    assert "SKIPPED  " in text and "needs 2 GPUs" in text
    assert "bf16 matmul 799.3 TFLOP/s" in text  # what the test printed
    assert "## failures" in text and "AssertionError: arithmetic" in text
    assert "torch " in text  # the machine: torch, CUDA and the GPUs
