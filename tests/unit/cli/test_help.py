"""Help as people expect: ``-h`` everywhere, reflowed text that fits 80 columns, no type noise
after flags, an Examples section and the exit codes per command; goldens at 80 columns."""

from __future__ import annotations

import pytest
import typer.main
from typer.testing import CliRunner

from gpudoctor.cli.app import app

runner = CliRunner()
GOLDEN_COMMANDS = ("run", "diagnose", "doctor", "lint", "explain")
# tune's help is owned by the tune work in flight (issue 19 lists it); it gets its Examples there
NO_EXAMPLES_YET: set[str] = set()


def _commands(group=None, prefix=()):
    group = group or typer.main.get_command(app)
    for name, command in sorted(group.commands.items()):
        if hasattr(command, "commands"):
            yield prefix + (name,)
            yield from _commands(command, prefix + (name,))
        else:
            yield prefix + (name,)


ALL = [()] + list(_commands())


def _help(path: tuple[str, ...], flag: str = "--help") -> str:
    result = runner.invoke(app, [*path, flag], prog_name="gpudoctor", terminal_width=80)
    assert result.exit_code == 0, result.output
    return result.output


@pytest.mark.parametrize("command", GOLDEN_COMMANDS)
def test_help_golden_at_80_columns(command: str, golden) -> None:
    golden(f"cli/help_{command}_80.txt", _help((command,)))


@pytest.mark.parametrize("path", ALL, ids=lambda p: " ".join(p) or "gpudoctor")
def test_dash_h_is_help_everywhere(path: tuple[str, ...]) -> None:
    assert _help(path, "-h") == _help(path, "--help")


@pytest.mark.parametrize("path", ALL, ids=lambda p: " ".join(p) or "gpudoctor")
def test_help_fits_80_columns_without_type_noise(path: tuple[str, ...]) -> None:
    text = _help(path)
    too_wide = [line for line in text.splitlines() if len(line) > 80]
    assert not too_wide, too_wide
    assert "<bool>" not in text
    assert "\b" not in text  # click's no-rewrap marker is consumed, never printed


@pytest.mark.parametrize("path", [p for p in ALL if p and not hasattr(
    typer.main.get_command(app).commands.get(p[0]), "commands") or len(p) > 1],
    ids=lambda p: " ".join(p))
def test_each_command_has_examples(path: tuple[str, ...]) -> None:
    if path[0] in NO_EXAMPLES_YET:
        pytest.skip(f"{path[0]}: help owned by parallel work")
    text = _help(path)
    assert "\n  Examples:\n    gpudoctor " in text, text


@pytest.mark.parametrize("command", ("run", "diagnose", "doctor", "check", "explain", "lint"))
def test_help_states_the_exit_codes(command: str) -> None:
    text = " ".join(_help((command,)).split())
    assert "Exit codes" in text and ("2 usage or input error" in text or "2 usage error" in text)


def test_root_help_lists_every_command_on_one_line_each(golden) -> None:
    text = _help(())
    golden("cli/help_root_80.txt", text)
    for name in typer.main.get_command(app).commands:
        assert f"\n  {name} " in text
