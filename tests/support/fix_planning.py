"""What the fix tests on small scripts share: a plan for some findings as WARNs, the patched
source (which must parse), an advice's reason, and a run of the patched copy on the CPU."""

from __future__ import annotations

import ast
import subprocess
import sys
import textwrap
from pathlib import Path

from gpudoctor.cli.fix_flow import patch_all
from gpudoctor.fix.locate import locate
from gpudoctor.fix.plan import plan_fix
from gpudoctor.fix.project import locate_project
from gpudoctor.records.finding import Finding, Severity
from gpudoctor.records.run import RankConfig

GPU = RankConfig(rank=0, local_rank=0, world_size=1, pid=1, device="cuda:0", device_name="NVIDIA H200",
                 usable_cpus=16, channels_last=False)
CPU = RankConfig(rank=0, local_rank=0, world_size=1, pid=1, device="cpu", usable_cpus=2, channels_last=False)
# a periodic stall's data: the first batch of each epoch waits for restarted workers
STALL_DATA = (("worker_restart", 1.0), ("first_batch_wait_ms", 50.0))


def findings(*codes: str, data: tuple = ()) -> list[Finding]:
    return [Finding(code=c, severity=Severity.WARN, title=c, fix=f"the fix for {c}", data=data) for c in codes]


def planned(source: str, *codes: str, config: RankConfig = GPU, path: Path | None = None, data: tuple = ()):
    """The located script, the plan for ``codes`` as WARNs, and the patched source (which must parse)."""
    source = textwrap.dedent(source)
    found = locate_project(path, source) if path is not None else locate(source)
    plan = plan_fix(found, findings(*codes, data=data), config)
    fixed, dropped = patch_all({"": source}, path or Path("train.py"), plan.changes)
    assert not dropped
    ast.parse(fixed[""])
    return found, plan, fixed[""]


def advice(plan, kind: str) -> str:
    return next(a.reason for a in plan.advice if a.reason.startswith(f"{kind}:"))


def runs(code: str, tmp_path: Path, *args: str) -> None:
    """The patched script trains on the CPU (it prints ``done`` at its end)."""
    script = tmp_path / "patched.py"
    script.write_text(code, encoding="utf-8")
    out = subprocess.run([sys.executable, str(script), *args], capture_output=True, text=True, timeout=120,
                         cwd=tmp_path)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip().endswith("done")
