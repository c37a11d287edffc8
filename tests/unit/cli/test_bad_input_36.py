"""Issue 36 items 6/7: bad input gives a clear error and a non-zero exit, never a traceback or a false pass."""

from __future__ import annotations

import os

import pytest
from typer.testing import CliRunner

from gpudoctor.cli.app import app

runner = CliRunner()


def _fifo(tmp_path):
    path = tmp_path / "x.py"
    os.mkfifo(path)
    return [str(path)]


def _loop(tmp_path):
    path = tmp_path / "loop.py"
    path.symlink_to(path)
    return [str(path)]


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs FIFOs")
@pytest.mark.parametrize("make", [_fifo, _loop], ids=["fifo", "symlink-loop"])
def test_lint_of_a_non_regular_file_is_an_error(tmp_path, make) -> None:
    args = make(tmp_path)
    result = runner.invoke(app, ["lint", *args])
    assert result.exit_code == 2
    assert "Traceback" not in result.output
    assert "not a regular file" in result.output and args[0] in result.output.replace("\n", "")


def test_memory_show_of_a_binary_file_is_a_clear_error(tmp_path) -> None:
    path = tmp_path / "oom.json"
    path.write_bytes(b"\xff\xfe\x00binary")
    result = runner.invoke(app, ["memory", "show", str(path)])
    assert result.exit_code != 0
    assert "Traceback" not in result.output and result.exception is None or isinstance(result.exception, SystemExit)
    assert "error:" in result.output
