"""A run that tries ``torch.compile`` may pause for recompilation in its first steps: the patched copy
of a compile change (and ``run --try compile``'s tried arm) gets the longer stall limit; the original
keeps the default, so a real stall in it is still caught at 30 s."""

from __future__ import annotations

from pathlib import Path

from gpudoctor.cli.fix import run_spec
from gpudoctor.cli.try_runs import stall_for
from gpudoctor.collectors.knobs import SLOW_WARMUP_STALL_S
from gpudoctor.collectors.launch import STALL_TIMEOUT_S


def test_only_a_compiling_run_gets_the_longer_stall_limit() -> None:
    assert stall_for(("compile",), STALL_TIMEOUT_S) == SLOW_WARMUP_STALL_S > STALL_TIMEOUT_S
    assert stall_for(("loader", "compile"), 900.0) == 900.0  # a longer limit the user gave stays
    assert stall_for(("loader", "bf16"), STALL_TIMEOUT_S) == STALL_TIMEOUT_S
    assert stall_for((), 45.0) == 45.0


def test_fix_runs_a_compile_patch_with_the_longer_limit_and_the_original_with_the_default(tmp_path: Path) -> None:
    command = ("python", "train.py")
    patched = run_spec(command, tmp_path / "try", 60, False, True, ("compile",))
    original = run_spec(command, tmp_path / "baseline", 60, False, True)
    loader = run_spec(command, tmp_path / "try-loader", 60, False, True, ("loader",))
    assert patched.stall_timeout_s == SLOW_WARMUP_STALL_S
    assert original.stall_timeout_s == loader.stall_timeout_s == STALL_TIMEOUT_S
