"""``monitor --summary``: on a finished log, at the end of a live or ``--log`` run; the leak hint's
memory trail and the hint itself."""

from __future__ import annotations

import io
import json

import pytest
from rich.console import Console
from typer.testing import CliRunner

import gpudoctor.collectors.nvml as nvml_mod
from gpudoctor.cli.app import app
from gpudoctor.cli.monitor import TRAIL_STEP_S, MemoryTrail
from gpudoctor.collectors.sample_log import SampleLog
from gpudoctor.records.gpu import GpuSample
from gpudoctor.records.units import GIB, MIB
from gpudoctor.report.monitor_view import render_monitor

from .test_soak import N, _host, _steady, _troubled


@pytest.fixture
def runner():
    return CliRunner(env={"COLUMNS": "120", "NO_COLOR": "1", "TERM": "dumb"})


@pytest.fixture
def with_fake(monkeypatch, fake_nvml, stable_commands):
    monkeypatch.setattr(nvml_mod, "default_nvml", lambda: fake_nvml)
    return fake_nvml


@pytest.fixture
def soak_log(tmp_path):
    path = tmp_path / "soak.csv"
    with SampleLog(path) as log:
        for k in range(N):
            log.write_gpu(_steady(k))
            log.write_gpu(_troubled(k))
            if k % 2 == 0:
                log.write_host(_host(k))
    return path


def test_summary_of_a_log_prints_the_verdict_and_exits_1_when_unstable(runner, soak_log):
    result = runner.invoke(app, ["monitor", "--summary", str(soak_log)])
    assert result.exit_code == 1, result.output
    out = result.stdout
    assert "soak summary: 2 GPUs, 29.9 min" in out
    assert "soak verdict: GPU 0 stable: utilization fluctuates 1.5 % (< 5 %)" in out
    assert "soak verdict: GPU 1 unstable" in out
    assert "host: CPU 45 % ± 5; host RAM used" in out  # the .host.csv sibling was read


def test_summary_of_a_log_as_json(runner, soak_log):
    result = runner.invoke(app, ["monitor", "--summary", str(soak_log), "--json"])
    assert result.exit_code == 1, result.output
    data = json.loads(result.stdout)["summary"]
    assert data["verdict"] == "unstable"
    assert [g["verdict"] for g in data["gpus"]] == ["stable", "unstable"]
    assert data["gpus"][1]["problems"] == ["fluctuation", "throttle", "memory_rising"]
    assert data["gpus"][1]["memory"]["fit"]["r2"] == pytest.approx(1.0)


def test_a_stable_log_exits_0(runner, tmp_path):
    path = tmp_path / "ok.jsonl"
    with SampleLog(path) as log:
        for k in range(N):
            log.write_gpu(_steady(k))
    result = runner.invoke(app, ["monitor", "--summary", str(path)])
    assert result.exit_code == 0, result.output
    assert "soak verdict: GPU 0 stable" in result.stdout


@pytest.mark.parametrize("args,message", [
    (["run.csv"], "a log file is read with --summary"),
    (["--summary", "missing.csv"], "no such log"),
    (["--summary", "x.csv", "--once"], "--summary LOGFILE reads a finished log"),
    (["--summary", "--once"], "--once takes one snapshot"),
])
def test_summary_usage_errors(runner, with_fake, args, message, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "x.csv").write_text("")
    result = runner.invoke(app, ["monitor", *args])
    assert result.exit_code == 2, result.output
    assert message in " ".join(result.stderr.split())


def test_a_file_that_is_not_a_log_is_a_clear_error(runner, tmp_path):
    path = tmp_path / "other.csv"
    path.write_text("a,b\n1,2\n")
    result = runner.invoke(app, ["monitor", "--summary", str(path)])
    assert result.exit_code == 2
    assert "cannot read it as a monitor log" in " ".join(result.stderr.split())


def test_a_log_run_ends_with_the_summary_of_its_own_rows(runner, with_fake, soak_log):
    # the log already holds an old soak: the summary covers only this run's rows
    result = runner.invoke(app, ["monitor", "--log", str(soak_log), "--interval", "0.1",
                                 "--duration", "1.2"])
    assert result.exit_code == 0, result.output
    assert "soak summary: 2 GPUs" in result.stdout
    assert "29.9 min" not in result.stdout
    assert "soak verdict: GPU 0 too short" in result.stdout


def test_live_summary_without_a_log(runner, with_fake):
    result = runner.invoke(app, ["monitor", "--summary", "--interval", "0.1", "--duration", "1.2"])
    assert result.exit_code == 0, result.output  # too short is not a failure
    assert "soak verdict: GPU 1 too short" in result.stdout


def test_live_summary_with_json_is_the_last_line(runner, with_fake):
    result = runner.invoke(app, ["monitor", "--summary", "--json", "--interval", "0.1",
                                 "--duration", "0.7"])
    assert result.exit_code == 0, result.output
    lines = [json.loads(line) for line in result.stdout.splitlines()]
    assert "summary" in lines[-1] and {next(iter(x)) for x in lines[:-1]} == {"gpu", "host"}
    assert lines[-1]["summary"]["verdict"] == "too_short"


def test_memory_trail_keeps_a_point_every_few_seconds():
    trail = MemoryTrail()
    for k in range(100):  # 10 s at 10 Hz
        trail.add(GpuSample(timestamp_s=k / 10, index=0, name="x", mem_used_bytes=k))
    trail.add(GpuSample(timestamp_s=11.0, index=1, name="x"))  # no memory reading: skipped
    points = trail.snapshot()
    assert list(points) == [0]
    assert [t for t, _ in points[0]] == [0.0, TRAIL_STEP_S]


def test_rising_memory_over_minutes_gets_the_leak_hint():
    trail = [(60.0 * m, float(10 * GIB + 100 * MIB * m)) for m in range(6)]  # +100 MiB/min, 5 min
    s = GpuSample(timestamp_s=300.0, index=0, name="NVIDIA H200", util_gpu_pct=50.0,
                  mem_used_bytes=int(trail[-1][1]), mem_total_bytes=140 * GIB)
    console = Console(file=io.StringIO(), width=100, color_system=None)
    console.print(render_monitor([s], memory_trails={0: trail}))
    text = " ".join(console.file.getvalue().split())
    assert "hint: GPU 0 memory used rose 500.0 MiB in the last 5 min (+100 MiB/min, fit r² 1.00)" \
        in text
    flat = [(t, 10.0 * GIB) for t, _ in trail]
    console = Console(file=io.StringIO(), width=100, color_system=None)
    console.print(render_monitor([s], memory_trails={0: flat}))
    assert "hint" not in console.file.getvalue()


def test_live_summary_says_when_old_samples_were_dropped(runner, with_fake, monkeypatch):
    import gpudoctor.cli.monitor as monitor_mod

    monkeypatch.setattr(monitor_mod, "SUMMARY_RING", 4)
    result = runner.invoke(app, ["monitor", "--summary", "--interval", "0.1", "--duration", "1"])
    assert result.exit_code == 0, result.output
    assert "4 samples a GPU" in result.stdout
    assert "the summary covers the last 4 samples of each GPU; use --log" in \
        " ".join(result.stderr.split())


def test_summary_of_a_run_directory_reads_its_gpu_and_host_samples(runner, tmp_path):
    from gpudoctor.records.base import JsonlWriter
    from gpudoctor.records.rundir import KIND_GPU, KIND_HOST

    with JsonlWriter(tmp_path / "gpu.jsonl", kind=KIND_GPU) as gpu:
        for k in range(N):
            gpu.write(_steady(k))
    with JsonlWriter(tmp_path / "host.jsonl", kind=KIND_HOST) as host:
        for k in range(0, N, 2):
            host.write(_host(k))
    result = runner.invoke(app, ["monitor", "--summary", str(tmp_path)])
    assert result.exit_code == 0, result.output
    assert "soak verdict: GPU 0 stable" in result.stdout
    assert "host: CPU 45 %" in result.stdout
