"""``gpudoctor fix``'s plan from real H200 recordings of the planted workloads: the findings the
recorded run gives (``tests/fixtures/runs/<name>``, its own configuration: cores, loaders, GPU),
turned into a patch of that workload's source — golden diffs, each still Python."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from gpudoctor.analysis.diagnose import diagnose
from gpudoctor.fix.edit import apply_located
from gpudoctor.fix.locate import locate
from gpudoctor.fix.plan import plan_fix
from gpudoctor.fix.view import unified_diff
from gpudoctor.records.rundir import load_run

ROOT = Path(__file__).resolve().parents[3]
RUNS = ROOT / "tests" / "fixtures" / "runs"
WORKLOADS = ROOT / "src" / "gpudoctor" / "workloads"

# recording -> (workload, the change kinds expected)
CASES = {
    "basic_user": ("basic_user", ["loader"]),  # the README's doctor example
    "fp32_convnet": ("fp32_convnet", ["cudnn_benchmark", "tf32", "channels_last", "bf16"]),
    "ddp_no_set_epoch-2gpu": ("ddp_no_set_epoch", ["set_epoch", "compile", "loader"]),
    "tiny_batch": ("tiny_batch", ["compile"]),
    "pageable_copies": ("pageable_copies", ["pin_memory"]),  # no DataLoader: the host tensors pinned
    "item_every_step": ("item_every_step", ["item"]),  # losses.append(loss.item()), accs.append(acc.cpu())
    "clean": ("clean", []),  # a tuned script: no patch
}


@pytest.mark.parametrize("recording", sorted(CASES))
def test_recorded_findings_patch_their_workload(recording: str, golden) -> None:
    workload, kinds = CASES[recording]
    run = load_run(RUNS / recording)
    config = run.configs[min(run.configs)]
    source = (WORKLOADS / f"{workload}.py").read_text(encoding="utf-8")
    plan = plan_fix(locate(source), list(diagnose(run)), config)
    fixed, kept, dropped = apply_located(source, plan.changes)
    assert [c.kind for c in kept] == kinds and not dropped and not plan.advice
    ast.parse(fixed)
    if not kinds:
        assert fixed == source and not plan.advice
        return
    golden(f"fix/recorded-{recording}.diff", unified_diff(source, fixed, f"{workload}.py"))
