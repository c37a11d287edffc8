"""One name for where results go: ``--out``/``-o`` in every command that writes a result (run,
doctor and memory run: a run directory; tune: a TOML; report: the HTML; check: the frozen
environment). The earlier names (``report --output``, ``check --freeze``) still work, hidden from
--help, with a note on stderr."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import typer.main
from typer.testing import CliRunner

from gpudoctor.cli.app import app

RUN = Path(__file__).resolve().parents[2] / "fixtures" / "runs" / "clean"
runner = CliRunner()


def _options(*path: str) -> dict[str, list[str]]:
    command = typer.main.get_command(app)
    for name in path:
        command = command.commands[name]
    return {p.name: list(p.opts) for p in command.params}


@pytest.mark.parametrize("path", [("run",), ("doctor",), ("memory", "run"), ("tune",), ("report",), ("check",)])
def test_every_result_writing_command_takes_out_and_o(path: tuple[str, ...]) -> None:
    opts = [o for opts in _options(*path).values() for o in opts]
    assert "--out" in opts and "-o" in opts, path


@pytest.mark.parametrize(("path", "old"), [(("report",), "--output"), (("check",), "--freeze")])
def test_earlier_names_are_hidden_from_help(path: tuple[str, ...], old: str) -> None:
    result = runner.invoke(app, [*path, "--help"])
    assert result.exit_code == 0 and "--out" in result.output and old not in result.output


@pytest.mark.parametrize("option", ["--out", "-o", "--output"])
def test_report_writes_where_out_says(tmp_path: Path, option: str) -> None:
    run = tmp_path / "run"
    shutil.copytree(RUN, run)
    target = tmp_path / "r.html"
    result = runner.invoke(app, ["report", str(run), option, str(target)])
    assert result.exit_code == 0, result.output
    assert target.is_file() and str(target) in result.stdout
    assert ("--output is now --out" in result.stderr) == (option == "--output")


def test_old_and_new_name_together_is_a_usage_error(tmp_path: Path) -> None:
    result = runner.invoke(app, ["report", str(RUN), "-o", str(tmp_path / "a.html"), "--output",
                                 str(tmp_path / "b.html")])
    assert result.exit_code == 2 and "give one of them" in result.stderr
