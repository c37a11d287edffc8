"""``gpudoctor monitor`` through typer's CliRunner, with the fake NVML injected.

Seam: the command builds ``GpuSampler()`` with no ``nvml`` argument, which calls
``gpudoctor.collectors.nvml.default_nvml()``; these tests monkeypatch that function.
"""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

import gpudoctor.collectors.nvml as nvml_mod
from gpudoctor.cli.app import app
from gpudoctor.collectors.sample_log import host_log_path, read_gpu_log, read_host_log


@pytest.fixture
def runner():
    return CliRunner(env={"COLUMNS": "100", "NO_COLOR": "1", "TERM": "dumb"})


@pytest.fixture
def with_fake(monkeypatch, fake_nvml, stable_commands):
    monkeypatch.setattr(nvml_mod, "default_nvml", lambda: fake_nvml)
    return fake_nvml


@pytest.fixture
def without_driver(monkeypatch, fake_nvml_factory):
    """NVML as on this machine: nvmlInit raises NVMLError_LibraryNotFound."""
    fake = fake_nvml_factory()
    fake.init_error = fake.NVMLError_LibraryNotFound()
    monkeypatch.setattr(nvml_mod, "default_nvml", lambda: fake)
    return fake


def test_once_json_is_a_snapshot_of_every_gpu_and_the_host(runner, with_fake):
    result = runner.invoke(app, ["monitor", "--once", "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert [g["name"] for g in data["gpus"]] == ["NVIDIA H200", "Tesla T4"]
    assert data["gpus"][1]["power_w"] is None
    assert "power" in data["gpus"][1]["unavailable"]
    assert data["host"]["ram_total_bytes"] > 0
    assert data["gpu_unavailable_reason"] == ""
    assert with_fake.shutdown_count == 1


def test_once_view_shows_gpus_and_processes(runner, with_fake):
    result = runner.invoke(app, ["monitor", "--once", "--gpus", "0"])
    assert result.exit_code == 0, result.output
    assert "0 H200" in result.stdout and "Tesla" not in result.stdout
    assert "python train.py --bf16" in result.stdout
    assert "host  CPU" in result.stdout


@pytest.mark.parametrize("suffix", [".csv", ".jsonl"])
def test_log_for_a_duration_is_complete(runner, with_fake, tmp_path, suffix):
    path = tmp_path / f"gpu{suffix}"
    result = runner.invoke(
        app, ["monitor", "--log", str(path), "--interval", "0.1", "--duration", "1.2"]
    )
    assert result.exit_code == 0, result.output
    gpu = read_gpu_log(path)
    assert len(gpu) >= 10 and {s.index for s in gpu} == {0, 1}
    assert len(gpu) % 2 == 0  # every tick logged whole
    assert len(read_host_log(host_log_path(path))) >= 1
    assert f"GPU rows to {path}" in result.stderr
    assert "0 H200" in result.stdout  # the final view, printed once when not a terminal


def test_json_streams_one_line_a_sample(runner, with_fake):
    result = runner.invoke(app, ["monitor", "--json", "--interval", "0.1", "--duration", "0.7"])
    assert result.exit_code == 0, result.output
    lines = [json.loads(line) for line in result.stdout.splitlines()]
    kinds = {next(iter(line)) for line in lines}
    assert kinds == {"gpu", "host"}
    assert sum("gpu" in line for line in lines) >= 6


def test_no_gpu_says_so_and_still_logs_the_host(runner, without_driver, tmp_path):
    path = tmp_path / "gpu.csv"
    result = runner.invoke(
        app, ["monitor", "--log", str(path), "--interval", "0.1", "--duration", "1.2"]
    )
    assert result.exit_code == 0, result.output
    assert "no GPU:" in result.stderr and "NVML Shared Library Not Found" in result.stderr
    assert "Showing host metrics only" in result.stderr
    assert read_gpu_log(path) == []
    assert len(read_host_log(host_log_path(path))) >= 1
    assert "host  CPU" in result.stdout


def test_once_json_without_a_gpu(runner, without_driver):
    result = runner.invoke(app, ["monitor", "--once", "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["gpus"] == [] and "NVML" in data["gpu_unavailable_reason"]
    assert data["host"]["cpu_pct"] is not None


@pytest.mark.parametrize(
    "args,message",
    [
        (["--interval", "0.05"], "--interval must be at least 0.1 s"),
        (["--duration", "0"], "--duration must be a positive number"),
        (["--gpus", "0,x"], "--gpus takes GPU indices, UUIDs (GPU-…) or PCI bus ids"),
        (["--gpus", "1,1"], "lists GPU 1 twice"),
        (["--gpus", "GPU-0000"], "'GPU-0000' matches no GPU"),
        (["--gpus", "GPU-"], "matches several GPUs"),
        (["--gpus", "18:00.0,0"], "GPU 0 is selected twice"),
        (["--gpus", "0,5"], "GPU index 5 does not exist"),
        (["--pid", "999999999"], "no such process"),
        (["--log", "samples.txt"], "name it *.csv"),
    ],
)
def test_bad_options_are_usage_errors_that_say_what_to_do(runner, with_fake, args, message):
    result = runner.invoke(app, ["monitor", "--once", *args])
    assert result.exit_code == 2, result.output
    assert message in " ".join(result.stderr.split())


def test_ctrl_c_ends_cleanly_with_the_log_complete(runner, with_fake, monkeypatch, tmp_path):
    import time

    import gpudoctor.cli.monitor as monitor_mod

    waits = []

    def pause(seconds):
        waits.append(seconds)
        if len(waits) == 4:
            raise KeyboardInterrupt
        time.sleep(seconds)

    monkeypatch.setattr(monitor_mod, "_pause", pause)
    path = tmp_path / "gpu.jsonl"
    result = runner.invoke(app, ["monitor", "--log", str(path), "--interval", "0.1"])
    assert result.exit_code == 0, result.output
    lines = path.read_text().splitlines()
    assert len(read_gpu_log(path)) == len(lines) - 1 >= 4  # header + whole lines only
    assert "logged" in result.stderr


def test_sigint_to_a_real_process_leaves_a_complete_log(tmp_path):
    """End to end: the real pynvml (no driver here), a real SIGINT, the host log complete."""
    import os
    import signal
    import subprocess
    import sys
    import time

    path = tmp_path / "run.csv"
    # faulthandler: a child still running after SIGINT is sent SIGABRT and prints where each of
    # its threads was. In CI the dump showed monitor's main thread still in its loop's sleep 30 s
    # after SIGINT: the signal never reached it as a KeyboardInterrupt, i.e. the child started with
    # SIGINT ignored or blocked, inherited from the test process (Python keeps an inherited
    # SIG_IGN, the nohup convention). A terminal's Ctrl-C reaches a process with the default
    # disposition: the child starts with that, and the message says what the test process had.
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path), "PYTHONFAULTHANDLER": "1"}
    inherited = (signal.getsignal(signal.SIGINT), signal.pthread_sigmask(signal.SIG_BLOCK, []))

    def as_from_a_terminal() -> None:
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, [signal.SIGINT])

    proc = subprocess.Popen(
        [sys.executable, "-m", "gpudoctor", "monitor", "--log", str(path), "--interval", "0.1"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, preexec_fn=as_from_a_terminal,
    )
    try:
        deadline = time.monotonic() + 30
        host = host_log_path(path)
        while time.monotonic() < deadline and (
            not host.exists() or len(host.read_text().splitlines()) < 3
        ):
            time.sleep(0.1)
        proc.send_signal(signal.SIGINT)
        try:
            out, err = proc.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            proc.send_signal(signal.SIGABRT)
            out, err = proc.communicate(timeout=30)
            raise AssertionError(f"monitor still ran 30 s after SIGINT (the test process had SIGINT handler, "
                                 f"blocked signals {inherited}); its threads:\n{err[-4000:]}") from None
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, err
    rows = read_host_log(host)
    assert len(rows) == len(host.read_text().splitlines()) - 1 >= 2
    assert "logged" in err


def test_pid_attributes_the_job_tree(runner, with_fake, monkeypatch):
    import os

    import gpudoctor.collectors.nvml_device as nvml_device

    me = os.getpid()
    with_fake.devices[0].procs.append((me, 1 << 30))
    monkeypatch.setattr(nvml_device, "command_for_pid", lambda pid: "pytest" if pid == me else "")
    result = runner.invoke(app, ["monitor", "--once", "--pid", str(me)])
    assert result.exit_code == 0, result.output
    import re

    assert re.search(r"job: \d+ process(es)?, CPU", result.stdout)
    row = next(line for line in result.stdout.splitlines() if f" {me} " in line)
    assert "yes" in row and "pytest" in row


def test_every_docs_example_uses_real_options():
    """Each ``gpudoctor monitor ...`` line of docs/monitor.md parses into known options."""
    import shlex
    from pathlib import Path

    import typer.main

    command = typer.main.get_command(app).commands["monitor"]
    known = {opt for p in command.params for opt in p.opts}
    flags = {opt for p in command.params if getattr(p, "is_flag", False) for opt in p.opts}
    doc = Path(__file__).resolve().parents[3] / "docs" / "monitor.md"
    lines = [ln.split("#")[0] for ln in doc.read_text().splitlines()
             if ln.startswith("gpudoctor monitor")]
    assert len(lines) >= 12
    for line in lines:
        words = shlex.split(line)[2:]
        i = 0
        while i < len(words):
            if "--summary" in words and not words[i].startswith("-"):  # the LOGFILE argument
                assert words[i].endswith((".csv", ".jsonl")), line
                i += 1
                continue
            assert words[i] in known, f"{line!r}: {words[i]} is not an option"
            i += 1 if words[i] in flags else 2
