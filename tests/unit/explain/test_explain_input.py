"""explain's input handling: binary input refused at once, and a lint code prints its rule page."""

from __future__ import annotations

import os
import time
from pathlib import Path

from typer.testing import CliRunner

from gpudoctor.cli.app import app

runner = CliRunner()


def test_binary_file_is_refused_within_a_second(tmp_path: Path) -> None:
    blob = tmp_path / "core.log"
    blob.write_bytes(os.urandom(8 * 2**20))
    start = time.perf_counter()
    result = runner.invoke(app, ["explain", str(blob)])
    assert time.perf_counter() - start < 1.0
    assert result.exit_code == 2 and "binary" in result.output


def test_binary_stdin_without_nul_is_refused() -> None:
    data = bytes(range(128, 256)) * 1000  # not UTF-8, no NUL byte
    result = runner.invoke(app, ["explain", "-"], input=data)
    assert result.exit_code == 2 and "does not look like text" in result.output


def test_text_with_some_odd_bytes_is_still_read(tmp_path: Path) -> None:
    log = tmp_path / "train.log"
    log.write_bytes(b"caf\xe9 step 1\n" + b"RuntimeError: CUDA out of memory. Tried to allocate 2.00 GiB\n" * 50)
    result = runner.invoke(app, ["explain", str(log)])
    assert result.exit_code == 1  # read, and the OOM matched


def test_lint_code_prints_the_rule_page() -> None:
    result = runner.invoke(app, ["explain", "GD502"])
    assert result.exit_code == 0
    assert result.stdout.startswith("### GD502 host-sync-in-hot-loop")
    assert "Bad:" in result.stdout and "Good:" in result.stdout
    assert runner.invoke(app, ["explain", "gd413"]).stdout.startswith("### GD413 shell-launch-script")
    unknown = runner.invoke(app, ["explain", "GD999"])
    assert unknown.exit_code == 2 and "no lint rule GD999" in unknown.output
