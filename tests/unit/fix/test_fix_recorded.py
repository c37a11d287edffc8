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
    assert [c.kind for c in kept] == kinds and not dropped
    # a launch-bound run: compile is patched, the larger batch is text (it changes the optimisation)
    assert [a.reason.split(":")[0] for a in plan.advice] == (["batch"] if "compile" in kinds else [])
    ast.parse(fixed)
    if not kinds:
        assert fixed == source and not plan.advice
        return
    golden(f"fix/recorded-{recording}.diff", unified_diff(source, fixed, f"{workload}.py"))


def test_launch_bound_recording_gets_compile_patched_and_the_larger_batch_as_text(golden) -> None:
    # the recorded tiny_batch run (launch-bound): model.compile() is the patch; the prescription's
    # larger batch changes the optimisation, so fix prints it and never writes it
    from gpudoctor.fix.view import advice_lines

    run = load_run(RUNS / "tiny_batch")
    source = (WORKLOADS / "tiny_batch.py").read_text(encoding="utf-8")
    plan = plan_fix(locate(source), list(diagnose(run)), run.configs[min(run.configs)])
    fixed, kept, _ = apply_located(source, plan.changes)
    assert [c.kind for c in kept] == ["compile"] and "batch_size=" not in unified_diff(source, fixed, "x")
    (advice,) = plan.advice
    assert advice.code == "GD-RUN-LAUNCH-BOUND" and "batch_size=4 * B" in advice.fix
    golden("fix/advice-launch_bound.txt", "\n".join(advice_lines(plan.advice)) + "\n")
