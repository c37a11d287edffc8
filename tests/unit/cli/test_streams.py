"""Clean streams: stdout holds gpudoctor's results only; the script's output goes to stderr (live)
and to the run's stdout.log; the profiler's log noise is left out of what the user sees (kept in
the log); the progress of long work is on stderr."""

from __future__ import annotations

import io
import json
import os
import threading
from collections import deque
from pathlib import Path

import pytest
from rich.console import Console

from gpudoctor.cli.progress import Progress, run_text
from gpudoctor.collectors.watch import NOISE, ProgressReporter, RunProgress, Tee, is_noise
from tests.support.cli_runner import gpudoctor

# Lines as Kineto wrote them on this CPU-only machine (gpudoctor run of a 20-step script).
KINETO_CPU = (
    b"USDT:2026-12-01 17:55:40 26296:26296 SyncActivityProfilerHandler.cpp:39] profiler_start\n",
    b"USDT:2026-12-01 17:55:40 26296:26296 SyncActivityProfilerHandler.cpp:46] profiler_stop\n",
    b"ERROR:2026-12-01 17:55:40 26296:26296 DeviceProperties.cpp:56] gpuGetDeviceCount failed with code 35\n",
)


@pytest.mark.parametrize("line", [
    *KINETO_CPU,
    b"STAGE:2023-05-11 10:11:20 1234:1234 ActivityProfilerController.cpp:311] Completed Stage: Warm Up\n",
])
def test_kineto_lines_are_noise(line: bytes) -> None:
    assert is_noise(line)


@pytest.mark.parametrize("line", [
    b"ERROR: could not open data/train.bin\n",
    b"RuntimeError: CUDA error: device-side assert triggered\n",
    b"USDT probes are great\n",
    b"epoch 1 loss 0.25\n",
])
def test_the_scripts_own_lines_are_not_noise(line: bytes) -> None:
    assert not is_noise(line)


def test_every_noise_entry_has_a_reason() -> None:
    assert all(len(why) > 20 for _, why in NOISE)


def _tee(data: bytes, echo) -> tuple[bytes, deque]:
    read_fd, write_fd = os.pipe()
    log = io.BytesIO()
    log.close = lambda: None  # keep it readable
    tail: deque = deque(maxlen=40)
    tee = Tee(os.fdopen(read_fd, "rb"), echo, log, threading.Lock(), tail)
    with os.fdopen(write_fd, "wb") as writer:
        for i in range(0, len(data), 7):  # in pieces that cut lines
            writer.write(data[i:i + 7])
            writer.flush()
    tee.thread.join(timeout=5)
    return log.getvalue(), tail


def test_tee_keeps_everything_in_the_log_and_echoes_without_the_noise() -> None:
    data = b"step 1\n" + b"".join(KINETO_CPU) + b"bar 10%\rbar 20%\rdone\nno newline at the end"
    shown: list[bytes] = []
    log, tail = _tee(data, shown.append)
    assert log == data
    echoed = b"".join(shown)
    assert echoed == b"step 1\nbar 10%\rbar 20%\rdone\nno newline at the end\n"
    assert b"gpuGetDeviceCount" not in echoed and b"USDT" not in echoed
    assert list(tail)[-1] == b"no newline at the end"


def test_tee_without_echo_only_logs() -> None:
    log, _ = _tee(b"a\nb\n", None)
    assert log == b"a\nb\n"


def test_progress_reports_each_change_of_stage_or_step() -> None:
    seen: list[RunProgress] = []
    report = ProgressReporter(seen.append, total=20, window=(15, 19))
    for steps, stopping in [(0, False), (0, False), (3, False), (3, False), (15, False), (20, True)]:
        report(steps, stopping)
    assert [(p.stage, p.steps) for p in seen] == [
        ("waiting", 0), ("training", 3), ("profiling", 15), ("stopping", 20)]
    assert run_text(seen[2]) == ("profiling steps 15-19", "step 15 of 20")
    assert run_text(RunProgress(stage="training", steps=4)) == ("training", "step 4")


def _console(terminal: bool) -> tuple[Console, io.StringIO]:
    buffer = io.StringIO()
    return Console(file=buffer, force_terminal=terminal, width=80, color_system=None), buffer


def test_plain_progress_is_one_line_per_stage_and_throttled_details() -> None:
    console, buffer = _console(terminal=False)
    with Progress(console) as progress:
        progress.run(RunProgress(stage="starting", total=60))  # not printed: "waiting" follows at once
        for steps in (0, 1, 2, 3):
            progress.run(RunProgress(stage="waiting" if steps == 0 else "training", steps=steps, total=60))
        progress.stage("diagnosing")
        progress.say("a message")
    assert buffer.getvalue().splitlines() == [
        "gpudoctor: waiting for the first optimizer step",
        "gpudoctor: training: step 1 of 60",  # steps 2 and 3: within PLAIN_EVERY_S, not repeated
        "gpudoctor: diagnosing",
        "a message",
    ]


def test_terminal_progress_shows_a_script_progress_bar_in_the_live_line() -> None:
    console, buffer = _console(terminal=True)
    with Progress(console) as progress:
        progress.stage("training", "step 3 of 60")
        assert "training · step 3 of 60" in progress._text()
        progress.echo(b"epoch 1\n12%|#   |\r")
        assert progress._text().endswith("12%|#   |")
        progress.echo(b"\x1b[31mred words\x1b[0m\n")
    out = buffer.getvalue()
    assert "epoch 1" in out
    assert "red words" in out and "[31m" not in out  # the script's ANSI codes parsed, not shown as text
    assert "\n12%|#   |" not in out  # the bar's update is not a printed line of its own


SCRIPT = """\
import sys, torch
print("SCRIPT-STDOUT", flush=True)
print("SCRIPT-STDERR", file=sys.stderr, flush=True)
model = torch.nn.Linear(4, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for _ in range(40):
    loss = model(torch.randn(8, 4)).pow(2).mean()
    opt.zero_grad(); loss.backward(); opt.step()
"""


@pytest.mark.parametrize("json_output", [False, True])
def test_run_keeps_the_scripts_output_off_stdout(tmp_path: Path, json_output: bool) -> None:
    (tmp_path / "s.py").write_text(SCRIPT, encoding="utf-8")
    args = ["run", "--steps", "12", "--out", "rd", "--fail-on", "never", *(["--json"] if json_output else [])]
    result = gpudoctor(*args, "python", "s.py", cwd=tmp_path, timeout=240)
    assert result.returncode == 0, result.stderr[-2000:]
    assert "SCRIPT-STDOUT" not in result.stdout and "SCRIPT-STDERR" not in result.stdout
    assert "SCRIPT-STDOUT" in result.stderr and "SCRIPT-STDERR" in result.stderr
    if json_output:
        assert json.loads(result.stdout)["manifest"]["steps_recorded"] == [12]
    else:
        assert "run directory: rd" in result.stdout
    # progress, on stderr only (stderr is a pipe here: plain stage lines)
    assert "gpudoctor: waiting for the first optimizer step" in result.stderr
    assert "gpudoctor: diagnosing" in result.stderr and "gpudoctor: diagnosing" not in result.stdout
    log = (tmp_path / "rd" / "stdout.log").read_text(encoding="utf-8")
    assert "SCRIPT-STDOUT" in log and "SCRIPT-STDERR" in log
    # the profiler window ran: whatever Kineto logged is in the log and not on the screen
    noisy = [line for line in log.splitlines() if is_noise(line.encode())]
    for line in noisy:
        assert line not in result.stderr
    assert "gpuGetDeviceCount" not in result.stderr and "profiler_start" not in result.stderr


def test_doctor_prints_every_stage_on_stderr_and_only_json_on_stdout(tmp_path: Path) -> None:
    """doctor used to print nothing for 17-26 s when stderr was not a terminal, and its spinner
    line hid stage 4: every stage is now a line of its own."""
    (tmp_path / "s.py").write_text(SCRIPT, encoding="utf-8")
    result = gpudoctor("doctor", "--no-try", "--steps", "8", "--json", "--fail-on", "never", "--out", "dd",
                       "python", "s.py", cwd=tmp_path, timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    payload = json.loads(result.stdout)  # stdout: the JSON and nothing else
    assert payload["run"]["manifest"]["steps_recorded"] == [8]
    for stage in ("gpudoctor: [1/5] checking the GPU stack", "gpudoctor: [2/5] running python s.py",
                  "gpudoctor: [3/5] diagnosed:", "[4/5] no fix to prove (--no-try)",
                  "gpudoctor: [5/5] writing the HTML report", "gpudoctor: waiting for the first optimizer step"):
        assert stage in result.stderr, stage
    assert "SCRIPT-STDOUT" not in result.stdout + result.stderr  # doctor keeps it in the log
    assert "SCRIPT-STDOUT" in (tmp_path / "dd" / "baseline" / "stdout.log").read_text(encoding="utf-8")


def test_memory_estimate_shows_its_stages_on_stderr(tmp_path: Path) -> None:
    (tmp_path / "m.py").write_text(
        "import torch\n"
        "def build():\n"
        "    return torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(3 * 8 * 8, 10))\n",
        encoding="utf-8")
    result = gpudoctor("memory", "estimate", "--model", "m.py:build", "--input", "image:3x8x8:10", "-b", "16",
                       "--device", "cpu", "--json", cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-2000:]
    assert json.loads(result.stdout)["batch_size"] == 16
    for stage in ("importing m.py:build", "building the model", "training probe batches on cpu"):
        assert f"gpudoctor: {stage}" in result.stderr, stage


def test_tee_passes_a_line_of_megabytes_without_a_newline_in_linear_time() -> None:
    # A child printing 3 MB with no line end: the old echo re-scanned its growing buffer from
    # every offset (quadratic: 100 KB took 19 s), so `run` hung and could not take SIGTERM.
    data = b"step 1\n" + b"y" * 3_000_000 + b"\nlast"
    shown: list[bytes] = []
    read_fd, write_fd = os.pipe()
    log = io.BytesIO()
    log.close = lambda: None
    tail: deque = deque(maxlen=40)
    tee = Tee(os.fdopen(read_fd, "rb"), shown.append, log, threading.Lock(), tail)
    with os.fdopen(write_fd, "wb") as writer:
        for i in range(0, len(data), 4096):
            writer.write(data[i:i + 4096])
    tee.thread.join(timeout=120)  # generous for a loaded machine; linear time takes well under 1 s
    assert not tee.thread.is_alive()
    assert log.getvalue() == data
    assert b"".join(shown) == data + b"\n"
    assert list(tail)[0] == b"step 1" and list(tail)[-1] == b"last"
    assert len(list(tail)[1]) <= 1 << 20  # the long line's end, bounded
