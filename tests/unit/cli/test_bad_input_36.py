"""Bad input gives a clear error that says what to do and a non-zero exit: never a traceback,
a hang or a false pass, and the user's files are left as they were. One case per failure found by
trying bad input as a new user would (the reliability list of bad inputs and faults)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from gpudoctor.cli.app import app
from tests.support.cli_runner import env

RUNS = Path(__file__).resolve().parents[2] / "fixtures" / "runs"
runner = CliRunner()


def _refused(args: list[str], *words: str, code: int = 2) -> str:
    result = runner.invoke(app, args)
    text = " ".join(result.output.split())
    assert result.exit_code == code, text
    assert "Traceback" not in text
    assert not isinstance(result.exception, Exception) or isinstance(result.exception, SystemExit), text
    for word in words:
        assert word in text, text
    return text


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs FIFOs")
def test_lint_of_a_fifo_is_an_error_not_a_pass(tmp_path: Path) -> None:
    path = tmp_path / "x.py"
    os.mkfifo(path)
    _refused(["lint", str(path)], "not a regular file", str(path))


def test_lint_of_a_symlink_loop_is_an_error_not_a_pass(tmp_path: Path) -> None:
    path = tmp_path / "loop.py"
    path.symlink_to(path)
    _refused(["lint", str(path)], "not a regular file", str(path))


def test_memory_show_of_a_binary_file(tmp_path: Path) -> None:
    path = tmp_path / "oom.json"
    path.write_bytes(b"\xff\xfe\x00binary")
    _refused(["memory", "show", str(path)], "error:", "not valid UTF-8", "oom.json")


def test_run_into_an_unwritable_place(tmp_path: Path) -> None:
    _refused(["run", "-o", "/proc/nope/run", "--", sys.executable, "-c", "pass"], "error:", "/proc/nope")


def test_report_into_an_unwritable_place(tmp_path: Path) -> None:
    run = tmp_path / "run"
    shutil.copytree(RUNS / "basic_user", run)
    _refused(["report", str(run), "-o", "/proc/nope/report.html"], "error:", "/proc/nope")


@pytest.mark.parametrize("name", ["host.jsonl", "steps-rank0.jsonl", "manifest.json"])
def test_a_non_utf8_byte_in_a_record_names_the_file(tmp_path: Path, name: str) -> None:
    run = tmp_path / "run"
    shutil.copytree(RUNS / "basic_user", run)
    with (run / name).open("ab") as fh:
        fh.write(b"\xff\n")
    for command in (["diagnose", str(run)], ["report", str(run), "-o", str(tmp_path / "r.html")]):
        _refused(command, name, "not valid UTF-8", "record it again")


def test_a_newer_record_says_upgrade_and_not_damaged(tmp_path: Path) -> None:
    run = tmp_path / "run"
    shutil.copytree(RUNS / "basic_user", run)
    manifest = json.loads((run / "manifest.json").read_text())
    manifest["schema_version"] = 999
    (run / "manifest.json").write_text(json.dumps(manifest))
    text = _refused(["diagnose", str(run)], "upgrade gpudoctor")
    assert "damaged" not in text


def test_explain_of_an_empty_argument() -> None:
    text = _refused(["explain", ""], "nothing to explain")
    assert "directory" not in text


@pytest.mark.parametrize("margin", ["nan", "5", "-0.1", "1"])
def test_memory_estimate_refuses_a_margin_out_of_range(margin: str) -> None:
    _refused(["memory", "estimate", "--model", "torch.nn:Flatten", "--input", "image:3x8x8:10",
              "-b", "4", "--device", "cpu", "--margin", margin], "--margin", "from 0 up to")


@pytest.mark.parametrize("model, words", [
    ("torch:randn", ["calling it failed", "takes no arguments"]),
    ("torch:get_default_dtype", ["returned a dtype, not an nn.Module"]),
])
def test_memory_estimate_of_something_that_is_not_a_model(model: str, words: list[str]) -> None:
    _refused(["memory", "estimate", "--model", model, "--input", "image:3x8x8:10", "-b", "4",
              "--device", "cpu"], *words)


def test_memory_estimate_of_a_batch_that_cannot_be_allocated() -> None:
    _refused(["memory", "estimate", "--model", "torch.nn:Flatten", "--input", "image:3x8x8:10",
              "-b", "1000000000000", "--device", "cpu"], "does not fit in memory", "--probes")


def test_tune_script_with_an_unclosed_quote() -> None:
    _refused(["tune", "loader", "--script", "python 'x"], "cannot be split", "quote it")


def test_tune_of_a_script_that_never_starts_is_not_a_pass(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    _refused(["tune", "loader", "--script", f"{sys.executable} nope.py"], "every trial failed",
             "nope.py", code=1)


def test_check_against_a_binary_file(tmp_path: Path) -> None:
    path = tmp_path / "frozen.json"
    path.write_bytes(bytes(range(256)))
    _refused(["check", "--against", str(path)], "frozen.json", "gpudoctor check --out")


@pytest.mark.parametrize("args", [["explain", "-"], ["explain"], ["lint", "-"]])
def test_a_closed_stdin_is_a_clear_error(tmp_path: Path, args: list[str]) -> None:
    result = subprocess.run([sys.executable, "-m", "gpudoctor", *args], cwd=tmp_path, env=env(),
                            stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=120,
                            preexec_fn=lambda: os.close(0))
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr and "stdin is closed" in result.stderr
