"""``gpudoctor run``'s options come before the command: the first positional word starts it, and
every word from there on is the command's; an unknown option before it is "no such option"."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import typer.main
from typer.testing import CliRunner

from gpudoctor.cli.app import app

SRC = Path(__file__).resolve().parents[3] / "src"


def _parse(*args: str):
    command = typer.main.get_command(app).commands["run"]
    return command.make_context("run", list(args))


@pytest.mark.parametrize(
    ("args", "params", "command"),
    [
        (["python", "train.py", "--steps", "7"], {"steps": None}, ["python", "train.py", "--steps", "7"]),
        (["--steps", "5", "python", "train.py", "--steps", "7", "-h"], {"steps": 5},
         ["python", "train.py", "--steps", "7", "-h"]),
        (["--steps", "5", "--", "python", "train.py", "--json"], {"steps": 5, "json_output": False},
         ["python", "train.py", "--json"]),
        (["--json", "--no-profile", "python", "-m", "pkg.train", "--full"],
         {"json_output": True, "no_profile": True, "full": False}, ["python", "-m", "pkg.train", "--full"]),
        (["torchrun", "--standalone", "--nproc_per_node", "2", "train.py"], {},
         ["torchrun", "--standalone", "--nproc_per_node", "2", "train.py"]),
    ],
)
def test_first_positional_word_starts_the_command(args, params, command) -> None:
    ctx = _parse(*args)
    assert ctx.args == command
    for name, value in params.items():
        assert ctx.params[name] == value, name


def test_unknown_option_before_the_command_is_no_such_option() -> None:
    result = CliRunner().invoke(app, ["run", "--stpes", "5", "--", "python", "x.py"])
    assert result.exit_code == 2
    assert "No such option: --stpes" in result.output and "--steps" in result.output
    assert "command not found" not in result.output


def test_no_command_is_a_usage_error() -> None:
    result = CliRunner().invoke(app, ["run", "--steps", "5"])
    assert result.exit_code == 2 and "no command given" in result.output


def test_script_gets_its_own_options_end_to_end(tmp_path: Path) -> None:
    """The bar: `gpudoctor run python s.py --steps 7` passes --steps 7 to the script."""
    (tmp_path / "s.py").write_text(
        "import json, sys, torch\n"
        "json.dump(sys.argv[1:], open('argv.json', 'w'))\n"
        "model = torch.nn.Linear(4, 1)\n"
        "opt = torch.optim.SGD(model.parameters(), lr=0.1)\n"
        "for _ in range(int(sys.argv[sys.argv.index('--steps') + 1])):\n"
        "    loss = model(torch.randn(8, 4)).pow(2).mean()\n"
        "    opt.zero_grad(); loss.backward(); opt.step()\n",
        encoding="utf-8")
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(SRC), env.get("PYTHONPATH", "")) if p)
    env.pop("GPUDOCTOR_RUN_DIR", None)
    result = subprocess.run(
        [sys.executable, "-m", "gpudoctor", "run", "--full", "--no-profile", "--json", "--fail-on", "never",
         "--out", "rd", sys.executable, "s.py", "--steps", "7", "-h"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=180)
    assert result.returncode == 0, result.stderr[-2000:]
    assert json.loads((tmp_path / "argv.json").read_text()) == ["--steps", "7", "-h"]
    manifest = json.loads(result.stdout)["manifest"]
    assert manifest["status"] == "completed" and manifest["steps_recorded"] == [7]
