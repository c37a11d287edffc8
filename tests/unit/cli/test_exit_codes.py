"""One exit-code contract for every command (gpudoctor.cli.output): 0 nothing to act on; 1
findings at or above --fail-on (default warn) or a failed check; 2 usage or input error; 130
interrupted; ``run`` passes the script's own non-zero exit code through first."""

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
from gpudoctor.cli.output import EXIT_FINDINGS, EXIT_OK, exit_code

SRC = Path(__file__).resolve().parents[3] / "src"
FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"
runner = CliRunner()


@pytest.mark.parametrize(
    ("severities", "fail_on", "expected"),
    [
        ((), "warn", 0),
        (("info",), "warn", 0),
        (("info",), "info", 1),
        (("warn", "info"), "warn", 1),
        (("warn",), "error", 0),
        (("error",), "error", 1),
        (("error",), "never", 0),
        (("warning",), "warn", 1),  # explain's catalog spelling
        (("fail", "pass", "skip"), "error", 1),  # check rows: FAIL is an error
        (("pass", "skip"), "info", 0),
    ],
)
def test_exit_code_thresholds(severities, fail_on, expected) -> None:
    assert exit_code(severities, fail_on=fail_on) == expected


def test_exit_code_precedence() -> None:
    """A script's own code (or 130) wins over a failed check, which wins over --fail-on."""
    assert exit_code(["error"], fail_on="warn", passthrough=3) == 3
    assert exit_code([], fail_on="never", passthrough=130) == 130
    assert exit_code([], fail_on="never", failed=True) == EXIT_FINDINGS
    assert exit_code(["info"], fail_on="warn", failed=False) == EXIT_OK


# --- diagnose: recorded runs ------------------------------------------------------------------

def _copy_run(tmp_path: Path, name: str) -> Path:
    target = tmp_path / name
    shutil.copytree(FIXTURES / "runs" / name, target)
    return target


@pytest.mark.parametrize(
    ("name", "fail_on", "expected"),
    [
        ("basic_user", "warn", 1),  # a WARN DataLoader finding: exit 1 (it exited 0 before)
        ("basic_user", "error", 0),
        ("basic_user", "never", 0),
        ("nan_loss", "error", 1),  # an ERROR finding
        ("nan_loss", "never", 0),
    ],
)
def test_diagnose_exit_code(tmp_path, name: str, fail_on: str, expected: int) -> None:
    run = _copy_run(tmp_path, name)
    result = runner.invoke(app, ["diagnose", "--json", "--fail-on", fail_on, str(run)])
    assert result.exit_code == expected, result.output
    severities = {f["severity"] for f in json.loads(result.stdout)["findings"]}
    assert ("error" in severities) if name == "nan_loss" else ("warn" in severities)


def test_diagnose_usage_errors_exit_2(tmp_path) -> None:
    assert runner.invoke(app, ["diagnose", str(tmp_path / "missing")]).exit_code == 2
    assert runner.invoke(app, ["diagnose", "--fail-on", "sometimes", str(tmp_path)]).exit_code == 2


# --- check, lint, explain: in-process -----------------------------------------------------------

def test_check_exit_code_from_recorded_facts() -> None:
    healthy = Path(__file__).resolve().parents[3] / "docs" / "examples" / "check-2gpu.json"
    assert runner.invoke(app, ["check", "--facts", str(healthy)]).exit_code == 0


def test_lint_exit_codes() -> None:
    bad, good = FIXTURES / "lint" / "GD101" / "bad.py", FIXTURES / "lint" / "GD101" / "good.py"
    assert runner.invoke(app, ["lint", "--isolated", str(bad)]).exit_code == 1
    assert runner.invoke(app, ["lint", "--isolated", "--exit-zero", str(bad)]).exit_code == 0
    assert runner.invoke(app, ["lint", "--isolated", "--select", "GD101", str(good)]).exit_code == 0
    assert runner.invoke(app, ["lint", "--output-format", "yaml", str(good)]).exit_code == 2


def test_explain_exit_codes_follow_the_contract() -> None:
    """A known failure is something to act on (1); text with none is not (0)."""
    known = "RuntimeError: CUDA error: device-side assert triggered"
    assert runner.invoke(app, ["explain", known]).exit_code == 1
    assert runner.invoke(app, ["explain", "--fail-on", "never", known]).exit_code == 0
    assert runner.invoke(app, ["explain", "KeyError: 'image_id'"]).exit_code == 0
    assert runner.invoke(app, ["explain", "no/such/file.log"]).exit_code == 2


# --- run and doctor: small scripts on the CPU ---------------------------------------------------

SLOW_DATA = """
import sys, time, torch
from torch.utils.data import DataLoader, Dataset
class Slow(Dataset):
    def __len__(self):
        return 4096
    def __getitem__(self, i):
        time.sleep(0.003)
        return torch.randn(8), torch.randn(1)
loader = DataLoader(Slow(), batch_size=8, shuffle=True)
model = torch.nn.Linear(8, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
for step, (x, y) in enumerate(loader):
    loss = torch.nn.functional.mse_loss(model(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
    if step + 1 == int(sys.argv[1]):
        sys.exit(int(sys.argv[2]))
"""


def _gd(*args: str, cwd: Path, timeout: float = 180) -> subprocess.CompletedProcess:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(SRC), env.get("PYTHONPATH", "")) if p)
    env.pop("GPUDOCTOR_RUN_DIR", None)
    return subprocess.run([sys.executable, "-m", "gpudoctor", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=timeout)


@pytest.fixture
def slow_data(tmp_path: Path) -> Path:
    (tmp_path / "slow.py").write_text(SLOW_DATA, encoding="utf-8")
    return tmp_path


def test_run_exits_1_on_a_warn_finding_and_0_below_fail_on(slow_data: Path) -> None:
    args = ("run", "--steps", "12", "--no-profile", "--json")
    result = _gd(*args, "--out", "a", "--", sys.executable, "slow.py", "1000", "0", cwd=slow_data)
    payload = json.loads(result.stdout)
    assert payload["exit_code"] == 0  # the script itself was fine
    assert "warn" in {f["severity"] for f in payload["findings"]}, payload["findings"]
    assert result.returncode == 1, result.stderr[-2000:]
    quiet = _gd(*args, "--fail-on", "never", "--out", "b", "--", sys.executable, "slow.py", "1000", "0",
                cwd=slow_data)
    assert quiet.returncode == 0, quiet.stderr[-2000:]


def test_run_passes_the_scripts_own_exit_code_through(slow_data: Path) -> None:
    """The script's non-zero code wins over findings, whatever --fail-on says (end to end at the
    default --fail-on; that it wins at --fail-on never too is test_exit_code_precedence's)."""
    result = _gd("run", "--full", "--no-profile", "--fail-on", "warn", "--out", "rd-warn", "--",
                 sys.executable, "slow.py", "8", "3", cwd=slow_data)
    assert result.returncode == 3, result.stderr[-2000:]


def test_run_usage_error_exits_2(tmp_path: Path) -> None:
    result = _gd("run", "--fail-on", "sometimes", "--", sys.executable, "x.py", cwd=tmp_path)
    assert result.returncode == 2 and "--fail-on" in result.stderr


def test_doctor_exits_1_on_a_warn_finding(slow_data: Path) -> None:
    """doctor used to exit 0 after a WARN; on a CPU machine the check's FAIL rows do not count."""
    result = _gd("doctor", "--no-try", "--steps", "12", "--json", "--out", "rd", "--",
                 sys.executable, "slow.py", "1000", "0", cwd=slow_data, timeout=300)
    payload = json.loads(result.stdout)
    severities = {f["severity"] for f in payload["run"]["findings"]}
    assert "warn" in severities and "error" not in severities, severities
    assert result.returncode == 1, result.stderr[-2000:]
