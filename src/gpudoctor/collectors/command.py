"""The training command of ``gpudoctor run``: checked before it starts, and named for its run directory."""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path

from gpudoctor.errors import GpuDoctorUserError


def resolve_command(command: tuple[str, ...]) -> tuple[str, ...]:
    """Check the program exists; raise :class:`GpuDoctorUserError` (exit 2) saying what to do."""
    if not command:
        raise GpuDoctorUserError("no command given; write it after --, e.g. gpudoctor run -- python train.py")
    program = command[0]
    if os.sep in program or (os.altsep and os.altsep in program):
        if not (os.path.isfile(program) and os.access(program, os.X_OK)):
            raise GpuDoctorUserError(f"{program}: no such executable file; check the path after --")
        return command
    found = shutil.which(program)
    if found is None:
        raise GpuDoctorUserError(
            f"{program}: command not found on PATH; write the full command after --, "
            "e.g. gpudoctor run -- python train.py"
        )
    return command


def default_run_dir(command: tuple[str, ...], base: Path = Path("gpudoctor-runs")) -> Path:
    """``gpudoctor-runs/<YYYYmmdd-HHMMSS>-<script name>``, never an existing directory."""
    stamp = time.strftime("%Y%m%d-%H%M%S")
    path = base / f"{stamp}-{run_name(command)}"
    n = 2
    while path.exists():
        path = base / f"{stamp}-{run_name(command)}-{n}"
        n += 1
    return path


def run_name(command: tuple[str, ...]) -> str:
    """A short name for the run: the script's stem, the ``-m`` module's last part, or the program."""
    for i, arg in enumerate(command):
        if arg == "-m" and i + 1 < len(command):
            return command[i + 1].rsplit(".", 1)[-1]
        if arg.endswith(".py"):
            return Path(arg).stem
    return Path(command[0]).name or "run"


__all__ = ["default_run_dir", "resolve_command", "run_name"]
