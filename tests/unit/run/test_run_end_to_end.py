"""``gpudoctor run`` end to end on the CPU: tiny scripts in ``tmp_path``, the real launcher."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import run_scripts

from gpudoctor.records.rundir import load_run

SRC = Path(__file__).resolve().parents[3] / "src"


def _env(**extra: str) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(SRC), env.get("PYTHONPATH", "")) if p)
    env.pop("GPUDOCTOR_RUN_DIR", None)
    env.update(extra)
    return env


def gpudoctor(*args: str, cwd: Path, timeout: float = 90) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "gpudoctor", *args], cwd=cwd, env=_env(),
        capture_output=True, text=True, timeout=timeout,
    )


def _script(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def test_run_records_steps_config_and_stops_at_n(tmp_path: Path) -> None:
    _script(tmp_path, "train.py", run_scripts.TRAIN)
    result = gpudoctor("run", "--steps", "12", "--json", "--keep-trace", "--fail-on", "never", "--out", "rd",
                       "--", sys.executable, "train.py", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    payload = json.loads(result.stdout)  # the child's output went to stderr: stdout is pure JSON
    assert payload["manifest"]["status"] == "stopped" and payload["exit_code"] == 0
    assert "stopping the script after 12 optimizer steps" in result.stderr
    assert "END OF SCRIPT" not in result.stderr  # it really was stopped
    run = load_run(tmp_path / "rd")
    assert [s.step for s in run.steps[0]] == list(range(12))
    first = run.steps[0][3]
    assert first.samples == 8 and first.micro_steps == 1 and first.host_syncs == 0
    assert first.loss is not None and first.loss_finite is True and first.data_wait_ms > 0
    assert first.gpu_ms is None and first.mem is None  # a CPU run: no device figures, no crash
    config = run.configs[0]
    assert config.optimizer == "AdamW" and config.param_count == 9 and config.param_dtypes == ("float32",)
    assert config.device == "cpu" and config.world_size == 1
    (loader,) = config.loaders
    assert (loader.num_workers, loader.batch_size, loader.sampler, loader.pin_memory) == (0, 8, "RandomSampler", False)
    window = run.windows[0]
    assert (window.first_step, window.last_step) == tuple(run.manifest.profile_window) == (7, 11)
    assert window.gpu_busy_frac is None and "CPU" in window.note and window.top_ops
    assert run.manifest.steps_recorded == (12,) and run.manifest.ranks == (0,)
    assert (tmp_path / "rd" / "stdout.log").is_file() and (tmp_path / "rd" / "trace-rank0.json").is_file()
    # diagnose re-reads the directory
    again = gpudoctor("diagnose", "rd", "--json", "--fail-on", "never", cwd=tmp_path)
    assert again.returncode == 0, again.stderr
    assert json.loads(again.stdout)["manifest"]["status"] == "stopped"


def test_script_shorter_than_the_window_says_how_to_profile_it(tmp_path: Path) -> None:
    # 64 samples / batch 8 = 8 steps in one epoch; --steps 30 puts the window at steps 25-29
    _script(tmp_path, "short.py", run_scripts.TRAIN.replace("range(100)", "range(1)").replace(
        "torch.randn(256, 8), torch.randn(256, 1)", "torch.randn(64, 8), torch.randn(64, 1)"))
    result = gpudoctor("run", "--steps", "30", "--json", "--fail-on", "never", "--out", "rd", "--",
                       sys.executable, "short.py", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    manifest = json.loads(result.stdout)["manifest"]
    assert manifest["status"] == "completed" and manifest["profile_window"] == [25, 29]
    assert any("ended after 8 optimizer steps, before the profiler window (steps 25-29)" in n
               and "--steps 8" in n for n in manifest["notes"])
    assert not list((tmp_path / "rd").glob("window-rank*.json"))


def test_explicit_window_is_profiled(tmp_path: Path) -> None:
    _script(tmp_path, "train.py", run_scripts.TRAIN)
    result = gpudoctor("run", "--steps", "12", "--window", "2:4", "--json", "--fail-on", "never", "--out", "rd",
                       "--", sys.executable, "train.py", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    window = load_run(tmp_path / "rd").windows[0]
    assert (window.first_step, window.last_step) == (2, 4)


def test_grad_scaler_skips_nan_loss_and_accumulation(tmp_path: Path) -> None:
    _script(tmp_path, "scaler.py", run_scripts.SCALER)
    result = gpudoctor("run", "--steps", "10", "--no-profile", "--json", "--out", "rd", "--",
                       sys.executable, "scaler.py", cwd=tmp_path)
    assert result.returncode == 1, result.stderr  # the script ran fine; its NaN losses are a finding
    run = load_run(tmp_path / "rd")
    steps = run.steps[0]
    assert len(steps) == 10  # steps the scaler skipped still count: every rank stops alike
    assert [s.loss_finite for s in steps] == [True] * 4 + [False] * 6
    assert [s.scaler_skipped for s in steps] == [False] * 4 + [True] * 6
    # the scale after update(): steady, then halved by every skipped step (the last step is
    # stopped inside scaler.step, before its update)
    assert [s.scaler_scale for s in steps] == [1024.0] * 4 + [512.0, 256.0, 128.0, 64.0, 32.0, None]
    assert all(s.micro_steps == 2 for s in steps)
    # empty_cache() runs after the optimizer step: counted in the next step
    assert [s.empty_cache_calls for s in steps] == [0] + [1] * 9
    config = run.configs[0]
    assert config.grad_scaler is True and config.autocast_dtypes == ("bfloat16",)
    assert config.ddp is not None and config.ddp.kind == "dp" and config.cudnn_deterministic is False


def test_fused_optimizer_skips_are_read_from_the_device_flag(tmp_path: Path) -> None:
    # The H200 failure: a fused AdamW steps even when GradScaler found inf/NaN, so the skip is
    # only in the scaler's found_inf tensor; the last step (stopped by --steps inside the
    # optimizer hook) must carry it too.
    _script(tmp_path, "fused.py", run_scripts.SCALER_FUSED)
    result = gpudoctor("run", "--steps", "8", "--no-profile", "--json", "--out", "rd", "--",
                       sys.executable, "fused.py", cwd=tmp_path)
    assert result.returncode == 1, result.stderr  # the script ran fine; its NaN losses are a finding
    run = load_run(tmp_path / "rd")
    steps = run.steps[0]
    assert [s.loss_finite for s in steps] == [True] * 4 + [False] * 4
    assert [s.scaler_skipped for s in steps] == [False] * 4 + [True] * 4
    assert [s.scaler_scale for s in steps] == [1024.0] * 4 + [512.0, 256.0, 128.0, None]
    assert all(s.host_syncs == 0 for s in steps)  # the flag is read lazily, not with .item()
    assert run.configs[0].optimizer_fused is True and run.configs[0].grad_scaler is True


def test_command_that_does_not_exist(tmp_path: Path) -> None:
    result = gpudoctor("run", "--out", "rd", "--", "no-such-trainer-xyz", "--lr", "1", cwd=tmp_path)
    assert result.returncode == 2
    assert "no-such-trainer-xyz: command not found" in result.stderr
    assert not (tmp_path / "rd").exists()


def test_diagnose_bad_directory(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    result = gpudoctor("diagnose", "empty", cwd=tmp_path)
    assert result.returncode == 2 and "not a gpudoctor run directory" in result.stderr
    result = gpudoctor("diagnose", "missing", cwd=tmp_path)
    assert result.returncode == 2 and "no such directory" in result.stderr


def test_crash_at_import_is_shown_explained_and_kept(tmp_path: Path) -> None:
    _script(tmp_path, "crash.py", run_scripts.CRASH_AT_IMPORT)
    result = gpudoctor("run", "--out", "rd", "--", sys.executable, "crash.py", cwd=tmp_path)
    assert result.returncode == 1  # the script's exit code passes through
    assert "RuntimeError: boom while importing the model" in result.stderr  # shown live
    assert "status: crashed" in result.stdout and "boom while importing" in result.stdout
    run = load_run(tmp_path / "rd")
    assert run.manifest.status == "crashed" and run.manifest.exit_code == 1
    assert "RuntimeError: boom while importing the model" in run.manifest.error
    assert "boom" in (tmp_path / "rd" / "stdout.log").read_text()


def test_script_that_never_steps_is_stopped_after_the_timeout(tmp_path: Path) -> None:
    _script(tmp_path, "nostep.py", run_scripts.NO_STEP)
    started = time.monotonic()
    result = gpudoctor("run", "--first-step-timeout", "4", "--out", "rd", "--", sys.executable, "nostep.py", cwd=tmp_path)
    assert time.monotonic() - started < 60
    assert result.returncode == 1
    assert "never called optimizer.step()" in result.stderr
    run = load_run(tmp_path / "rd")
    assert run.manifest.status == "timeout" and "optimizer.step()" in run.manifest.error
    assert "setting up forever" in (tmp_path / "rd" / "stdout.log").read_text()


def test_ctrl_c_stops_the_child_and_keeps_the_records(tmp_path: Path) -> None:
    _script(tmp_path, "forever.py", run_scripts.FOREVER)
    proc = subprocess.Popen(
        [sys.executable, "-m", "gpudoctor", "run", "--full", "--out", "rd", "--", sys.executable, "forever.py"],
        cwd=tmp_path, env=_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    try:
        deadline = time.monotonic() + 60
        while not (tmp_path / "rd" / "config-rank0.json").exists():  # written at the first step
            assert time.monotonic() < deadline and proc.poll() is None
            time.sleep(0.2)
        time.sleep(1.0)
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, err
    assert "interrupted" in err
    run = load_run(tmp_path / "rd")
    assert run.manifest.status == "interrupted" and run.manifest.ended_at is not None
    assert len(run.steps[0]) >= 5 and run.configs[0].optimizer == "SGD"
    steps = [s.step for s in run.steps[0]]
    assert steps == list(range(len(steps)))  # nothing lost in the middle


def test_try_num_workers_prints_before_and_after(tmp_path: Path) -> None:
    _script(tmp_path, "slow.py", run_scripts.SLOW_DATA)
    result = gpudoctor("run", "--steps", "16", "--no-profile", "--try", "num_workers=2", "--repeats", "2",
                       "--json", "--fail-on", "never", "--out", "rd", "--", sys.executable, "slow.py", cwd=tmp_path,
                       timeout=240)
    assert result.returncode == 0, result.stderr
    comparison = json.loads(result.stdout)["comparison"]
    judgement = comparison["judgement"]
    # interleaved and repeated: two runs of each (the cap), each with its steady throughput
    assert [arm for arm, _ in comparison["run_dirs"]] == ["baseline", "try", "baseline", "try"]
    assert len(judgement["baseline"]) == len(judgement["tried"]) == 2
    assert judgement["noise"] is not None and judgement["verdict"] in ("faster", "within_noise")
    assert comparison["knobs"] == ["num_workers=2"]
    base, tried = load_run(tmp_path / "rd" / "baseline"), load_run(tmp_path / "rd" / "try-2")
    assert base.configs[0].loaders[0].num_workers == 0
    assert tried.configs[0].loaders[0].num_workers == 2 and tried.manifest.knobs == ("num_workers=2",)
    assert "--try: baseline run 2" in result.stderr


def test_bad_knob_is_a_usage_error(tmp_path: Path) -> None:
    result = gpudoctor("run", "--try", "num_wrkers=2", "--", sys.executable, "x.py", cwd=tmp_path)
    assert result.returncode == 2 and "unknown knob 'num_wrkers'" in result.stderr


@pytest.mark.parametrize("args", [["--steps", "0"], ["--steps", "5", "--full"], ["--window", "20"],
                                  ["--window", "0:3"], ["--steps", "10", "--window", "8:12"],
                                  ["--window", "20:24", "--no-profile"]])
def test_bad_step_options(tmp_path: Path, args: list[str]) -> None:
    result = gpudoctor("run", *args, "--", sys.executable, "x.py", cwd=tmp_path)
    assert result.returncode == 2
