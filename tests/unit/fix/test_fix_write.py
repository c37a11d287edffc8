"""``--write``: the backup is never overwritten, the file keeps its mode and its line endings."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from gpudoctor.cli.fix import backup_path, write_fixed
from gpudoctor.errors import GpuDoctorUserError
from gpudoctor.fix.edit import apply_located
from gpudoctor.fix.locate import locate
from gpudoctor.fix.plan import plan_fix
from gpudoctor.records.finding import Finding, Severity
from gpudoctor.records.run import RankConfig

SCRIPT = Path(__file__).resolve().parents[2] / "fixtures" / "fix" / "conv_ddp.py"


def test_backups_are_numbered_and_the_mode_is_kept(tmp_path: Path) -> None:
    script = tmp_path / "train.py"
    script.write_text("old\n", encoding="utf-8")
    os.chmod(script, 0o750)
    assert backup_path(script).name == "train.py.orig"
    first = write_fixed(script, "old\n", "new\n")
    second = write_fixed(script, "new\n", "newer\n")
    assert (first.name, second.name) == ("train.py.orig", "train.py.orig.2")
    assert first.read_text(encoding="utf-8") == "old\n" and second.read_text(encoding="utf-8") == "new\n"
    assert script.read_text(encoding="utf-8") == "newer\n" and script.stat().st_mode & 0o777 == 0o750


def test_a_script_changed_meanwhile_is_not_written(tmp_path: Path) -> None:
    script = tmp_path / "train.py"
    script.write_text("edited by the user\n", encoding="utf-8")
    with pytest.raises(GpuDoctorUserError, match="changed while gpudoctor fix ran"):
        write_fixed(script, "what fix read\n", "patched\n")
    assert script.read_text(encoding="utf-8") == "edited by the user\n" and not list(tmp_path.glob("*.orig*"))


def test_crlf_line_endings_are_kept() -> None:
    source = SCRIPT.read_text(encoding="utf-8").replace("\n", "\r\n")
    config = RankConfig(rank=0, local_rank=0, world_size=1, pid=1, device="cuda:0", usable_cpus=16)
    finding = Finding(code="GD-RUN-CUDNN-BENCHMARK", severity=Severity.WARN, title="", evidence=(), fix="")
    fixed, kept, _ = apply_located(source, plan_fix(locate(source), [finding], config).changes)
    assert [c.kind for c in kept] == ["cudnn_benchmark"]
    assert "torch.backends.cudnn.benchmark = True\r\n" in fixed and fixed.count("\n") == fixed.count("\r\n")
