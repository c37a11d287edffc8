"""Launcher helpers: command checks, run names, the spec, the child's environment."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from gpudoctor.collectors import instrument
from gpudoctor.collectors.knobs import parse_knobs
from gpudoctor.collectors.launch import (
    RunSpec,
    _exit_code,
    child_environment,
    default_run_dir,
    resolve_command,
    run_name,
)
from gpudoctor.errors import GpuDoctorUserError


def test_resolve_command() -> None:
    assert resolve_command((sys.executable, "x.py")) == (sys.executable, "x.py")
    assert resolve_command(("python3", "-c", "1")) == ("python3", "-c", "1")
    with pytest.raises(GpuDoctorUserError, match="command not found on PATH"):
        resolve_command(("definitely-not-a-command-42",))
    with pytest.raises(GpuDoctorUserError, match="no such executable file"):
        resolve_command(("./missing/trainer",))
    with pytest.raises(GpuDoctorUserError, match="no command given"):
        resolve_command(())


@pytest.mark.parametrize(
    ("command", "name"),
    [
        (("python", "train.py", "--lr", "0.1"), "train"),
        (("python", "-m", "pkg.train_gpt"), "train_gpt"),
        (("torchrun", "--standalone", "--nproc_per_node", "2", "scripts/ddp.py"), "ddp"),
        (("/usr/bin/accelerate-launch",), "accelerate-launch"),
    ],
)
def test_run_name(command: tuple[str, ...], name: str) -> None:
    assert run_name(command) == name


def test_default_run_dir_never_reuses(tmp_path: Path) -> None:
    first = default_run_dir(("python", "train.py"), base=tmp_path)
    assert first.parent == tmp_path and first.name.endswith("-train")
    first.mkdir()
    assert default_run_dir(("python", "train.py"), base=tmp_path) != first


def test_spec_validation_and_window(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="--full"):
        RunSpec(command=("python",), run_dir=tmp_path, steps=0)
    with pytest.raises(ValueError, match="after --"):
        RunSpec(command=(), run_dir=tmp_path)
    with pytest.raises(ValueError, match="> 0 seconds"):
        RunSpec(command=("python",), run_dir=tmp_path, first_step_timeout_s=0)
    # the window closes the diagnostic steps: no step runs after its closing sync
    assert RunSpec(command=("python",), run_dir=tmp_path).window == (55, 59)
    assert RunSpec(command=("python",), run_dir=tmp_path, steps=12).window == (7, 11)
    assert RunSpec(command=("python",), run_dir=tmp_path, steps=10).window == (5, 9)
    # too short for a warm-up of 5 before it: after a quarter of the run
    assert RunSpec(command=("python",), run_dir=tmp_path, steps=8).window == (2, 6)
    assert RunSpec(command=("python",), run_dir=tmp_path, steps=2).window == (1, 1)
    assert RunSpec(command=("python",), run_dir=tmp_path, steps=1).window is None
    # --full: the end is unknown, the window comes early
    assert RunSpec(command=("python",), run_dir=tmp_path, steps=None).window == (10, 14)
    assert RunSpec(command=("python",), run_dir=tmp_path, profile=False).window is None
    chosen = RunSpec(command=("python",), run_dir=tmp_path, steps=None, profile_window=(54, 58))
    assert chosen.window == (54, 58)


@pytest.mark.parametrize(("window", "steps", "match"), [
    ((0, 4), 60, "1 <= FIRST <= LAST"),
    ((9, 8), 60, "1 <= FIRST <= LAST"),
    ((50, 60), 60, "ends after the run stops .--steps 60"),
])
def test_spec_rejects_a_window_that_cannot_be_taken(tmp_path: Path, window, steps, match) -> None:
    with pytest.raises(ValueError, match=match):
        RunSpec(command=("python",), run_dir=tmp_path, steps=steps, profile_window=window)


def test_child_environment(tmp_path: Path) -> None:
    spec = RunSpec(command=("python", "x.py"), run_dir=tmp_path / "rd", steps=30,
                   knobs=parse_knobs("pin_memory"), keep_trace=True)
    env = child_environment(spec, {"PYTHONPATH": "/theirs", "GPUDOCTOR_KNOBS": "stale"})
    assert env["PYTHONPATH"] == os.pathsep.join((str(instrument.SITE_DIR), "/theirs"))
    assert env["GPUDOCTOR_RUN_DIR"] == str((tmp_path / "rd").resolve())
    assert env["GPUDOCTOR_STEPS"] == "30" and env["GPUDOCTOR_PROFILE"] == "25:29"
    assert env["GPUDOCTOR_KEEP_TRACE"] == "1" and env["GPUDOCTOR_KNOBS"] == "pin_memory"
    assert (Path(env["GPUDOCTOR_PKG_ROOT"]) / "gpudoctor" / "__init__.py").is_file()
    full = child_environment(RunSpec(command=("python",), run_dir=tmp_path, steps=None, profile=False), {})
    assert full["GPUDOCTOR_STEPS"] == "" and full["GPUDOCTOR_PROFILE"] == "" and "GPUDOCTOR_KNOBS" not in full


def test_exit_codes() -> None:
    assert _exit_code("stopped", 0) == 0
    assert _exit_code("crashed", 3) == 3
    assert _exit_code("crashed", -9) == 137
    assert _exit_code("interrupted", -2) == 130
    assert _exit_code("timeout", -15) == 1 and _exit_code("no_steps", 0) == 1
