"""``--thresholds FILE`` on run, diagnose and doctor: a TOML file of limits, checked name by name.

A value that moves a limit changes the diagnosis of a recorded run; a bad file (unknown name,
wrong type, out of range, not TOML, missing) is refused with exit code 2 and a message naming
what to fix, before anything runs; findings made with changed limits carry them in their
``analysis_version``, so ``report`` does not take them for the default analysis.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from gpudoctor.cli.app import app
from gpudoctor.cli.diagnose import analysis_version
from gpudoctor.cli.output import EXIT_USAGE
from gpudoctor.cli.thresholds_option import current_thresholds
from gpudoctor.analysis.thresholds import Thresholds

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"
runner = CliRunner()


def _run_copy(tmp_path: Path, name: str = "pageable_copies") -> Path:
    target = tmp_path / name
    shutil.copytree(FIXTURES / "runs" / name, target)
    return target


def _toml(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "th.toml"
    path.write_text(text, encoding="utf-8")
    return path


def _codes(result) -> list[str]:
    return [f["code"] for f in json.loads(result.stdout)["findings"]]


def test_a_changed_limit_changes_the_diagnosis(tmp_path: Path) -> None:
    run_dir = _run_copy(tmp_path)
    default = runner.invoke(app, ["diagnose", str(run_dir), "--json", "--fail-on", "never"])
    assert default.exit_code == 0, default.output
    assert "GD-RUN-H2D-PAGEABLE" in _codes(default)
    # the run's host-to-device bytes per step are under 1 TiB: the pageable rule goes quiet
    path = _toml(tmp_path, "h2d_min_bytes_per_step = 1099511627776\n")
    moved = runner.invoke(app, ["diagnose", str(run_dir), "--json", "--fail-on", "never",
                                "--thresholds", str(path), "--save"])
    assert moved.exit_code == 0, moved.output
    assert "GD-RUN-H2D-PAGEABLE" not in _codes(moved)
    stored = json.loads((run_dir / "findings.json").read_text())["data"]
    assert stored["analysis_version"].startswith(analysis_version() + "+thresholds-")
    assert "GD-RUN-H2D-PAGEABLE" not in [f["code"] for f in stored["findings"]]
    # the command's thresholds do not outlive it
    assert current_thresholds() == Thresholds()


def test_report_recomputes_findings_made_with_other_thresholds(tmp_path: Path) -> None:
    from gpudoctor.cli.diagnose import current_findings
    from gpudoctor.records.rundir import load_run

    run_dir = _run_copy(tmp_path)
    path = _toml(tmp_path, "h2d_min_bytes_per_step = 1099511627776\n")
    assert runner.invoke(app, ["diagnose", str(run_dir), "--thresholds", str(path),
                               "--fail-on", "never", "--save"]).exit_code == 0
    found = current_findings(load_run(run_dir))
    assert "GD-RUN-H2D-PAGEABLE" in [f.code for f in found]


@pytest.mark.parametrize(("text", "words"), [
    ("info_gian = 0.02\n", ["unknown threshold 'info_gian'", "did you mean 'info_gain'"]),
    ("warmup_steps = 2.5\n", ["warmup_steps must be an integer", "2.5"]),
    ("info_gain = \"2%\"\n", ["info_gain must be a number", "'2%'"]),
    ("info_gain = true\n", ["info_gain must be a number"]),
    ("info_gain = -0.1\n", ["info_gain=-0.1 is negative"]),
    ("warn_gain = 1.5\n", ["warn_gain=1.5 is a share"]),
    ("info_gain = 0.5\nwarn_gain = 0.2\n", ["info_gain must not exceed warn_gain"]),
    ("[thresholds]\ninfo_gain = 0.02\n", ["unknown threshold 'thresholds'"]),
    ("info_gain = \n", ["not valid TOML"]),
])
def test_a_bad_file_is_refused_with_exit_2(tmp_path: Path, text: str, words: list[str]) -> None:
    run_dir = _run_copy(tmp_path)
    before = (run_dir / "findings.json").read_bytes()
    path = _toml(tmp_path, text)
    result = runner.invoke(app, ["diagnose", str(run_dir), "--thresholds", str(path)])
    assert result.exit_code == EXIT_USAGE, result.output
    message = " ".join(result.stderr.split())
    assert f"--thresholds {path}" in message
    for word in words:
        assert word in message
    assert (run_dir / "findings.json").read_bytes() == before  # nothing analysed


def test_a_missing_file_is_refused(tmp_path: Path) -> None:
    result = runner.invoke(app, ["diagnose", str(_run_copy(tmp_path)), "--thresholds",
                                 str(tmp_path / "nope.toml")])
    assert result.exit_code == EXIT_USAGE
    assert "no such file" in result.stderr


@pytest.mark.parametrize("command", (["run", "python", "-c", "pass"], ["doctor", "--no-try"]))
def test_run_and_doctor_refuse_a_bad_file_before_running(tmp_path: Path, command: list[str]) -> None:
    path = _toml(tmp_path, "not_a_threshold = 1\n")
    out = tmp_path / "out"
    result = runner.invoke(app, [command[0], "--thresholds", str(path), "--out", str(out), *command[1:]])
    assert result.exit_code == EXIT_USAGE, result.output
    assert "unknown threshold 'not_a_threshold'" in result.stderr
    assert not out.exists()


def test_run_diagnoses_with_the_files_thresholds(tmp_path: Path) -> None:
    """End to end: a script run under the probes, judged with a warm-up of 8 steps from the file."""
    import sys

    from cli_runner import gpudoctor

    (tmp_path / "train.py").write_text(
        "import torch\nm = torch.nn.Linear(4, 1)\nopt = torch.optim.SGD(m.parameters(), lr=0.1)\n"
        "for _ in range(16):\n    m(torch.randn(8, 4)).sum().backward()\n    opt.step()\n    opt.zero_grad()\n",
        encoding="utf-8")
    path = _toml(tmp_path, "warmup_steps = 8\n")
    result = gpudoctor("run", "--thresholds", str(path), "--no-profile", "--json", "--fail-on", "never",
                       "--out", "rd", "--", sys.executable, "train.py", cwd=tmp_path, timeout=120)
    assert result.returncode == 0, result.stderr[-2000:]
    (stats,) = json.loads(result.stdout)["stats"]
    assert stats["steps"] == 16 - 8  # the steady steps after the file's warm-up
    stored = json.loads((tmp_path / "rd" / "findings.json").read_text())["data"]
    assert "+thresholds-" in stored["analysis_version"]
