"""``gpudoctor fix``'s source changes: one golden diff per change kind, each applied alone to the
same script, the result still compiling; and what is not located gets text advice, not a patch."""

from __future__ import annotations

import ast
import dataclasses
from pathlib import Path

import pytest

from gpudoctor.cli.fix_flow import patch
from gpudoctor.fix.edit import apply_located
from gpudoctor.fix.locate import locate
from gpudoctor.fix.plan import plan_fix
from gpudoctor.fix.view import unified_diff
from gpudoctor.records.finding import Finding, Severity
from gpudoctor.records.run import LoaderConfig, RankConfig

SCRIPT = Path(__file__).resolve().parents[2] / "fixtures" / "fix" / "conv_ddp.py"
LOADER = LoaderConfig(num_workers=0, pin_memory=False, persistent_workers=False, prefetch_factor=None,
                      batch_size=32, drop_last=False, sampler="DistributedSampler", dataset="TensorDataset",
                      batches=8)
CONFIG = RankConfig(rank=0, local_rank=0, world_size=1, pid=1, device="cuda:0", usable_cpus=16,
                    loaders=(LOADER,), channels_last=False, cudnn_benchmark=False)


def finding(code: str, severity: Severity = Severity.WARN) -> Finding:
    return Finding(code=code, severity=severity, title=code, evidence=(), fix=f"the fix for {code}")


def changes_for(source: str, *codes: str, config: RankConfig = CONFIG):
    return plan_fix(locate(source), [finding(c) for c in codes], config)


# (finding, change kind): every kind fix makes, one golden diff each
KINDS = [
    ("GD-RUN-DATALOADER", "loader"),  # with non_blocking on the batch copies (pinned memory)
    ("GD-RUN-H2D-PAGEABLE", "pin_memory"),  # with non_blocking, measured as one change
    ("GD-RUN-CUDNN-BENCHMARK", "cudnn_benchmark"),
    ("GD-RUN-FP32-COMPUTE", "tf32"),
    ("GD-RUN-CHANNELS-LAST", "channels_last"),
    ("GD-RUN-FP32-COMPUTE", "bf16"),
    ("GD-RUN-LAUNCH-BOUND", "compile"),
    ("GD-RUN-HOST-SYNC", "item"),
    ("GD-RUN-NO-SET-EPOCH", "set_epoch"),
]


@pytest.mark.parametrize(("code", "kind"), KINDS, ids=[k for _, k in KINDS])
def test_each_change_kind_matches_its_golden_diff(code: str, kind: str, golden) -> None:
    source = SCRIPT.read_text(encoding="utf-8")
    plan = changes_for(source, code)
    (change,) = [c for c in plan.changes if c.kind == kind]
    fixed, kept, dropped = apply_located(source, [change])
    assert kept == [change] and not dropped
    ast.parse(fixed)  # still Python
    assert fixed.count("# gpudoctor fix: ") >= 1 and f"# gpudoctor fix: {code} — " in fixed
    golden(f"fix/{kind}.diff", unified_diff(source, fixed, "conv_ddp.py"))


def test_non_blocking_alone_where_the_loader_pins_already(golden) -> None:
    source = SCRIPT.read_text(encoding="utf-8").replace("num_workers=0,", "pin_memory=True,")
    pinned = RankConfig(rank=0, local_rank=0, world_size=1, pid=1, device="cuda:0", usable_cpus=16,
                        loaders=(dataclasses.replace(LOADER, pin_memory=True),))
    plan = changes_for(source, "GD-RUN-H2D-BLOCKING", config=pinned)
    assert [c.kind for c in plan.changes] == ["non_blocking"]
    fixed, _, dropped = apply_located(source, plan.changes)
    assert not dropped and fixed.count("non_blocking=True") == 2
    golden("fix/non_blocking.diff", unified_diff(source, fixed, "conv_ddp.py"))


def test_lint_rewrites_ride_along_and_everything_together_compiles(golden) -> None:
    source = SCRIPT.read_text(encoding="utf-8")
    plan = changes_for(source, *sorted({c for c, _ in KINDS}))
    assert [(a.code, a.reason.split(":")[0]) for a in plan.advice] == [("GD-RUN-LAUNCH-BOUND", "batch")]
    from gpudoctor.fix.ops import Change

    lint = Change(kind="lint", code="GD204", why="lint --fix's safe rewrites", ops=())
    fixed, dropped = patch(source, SCRIPT, [*plan.changes, lint])
    assert not dropped
    ast.parse(fixed)
    assert "set_to_none=False" not in fixed  # GD204: zero_grad(set_to_none=True), torch's default
    golden("fix/all.diff", unified_diff(source, fixed, "conv_ddp.py"))


def test_loader_values_come_from_the_loader_plan() -> None:
    source = SCRIPT.read_text(encoding="utf-8")
    few = RankConfig(rank=0, local_rank=0, world_size=2, pid=1, device="cuda:0", usable_cpus=6,
                     local_world_size=2, loaders=(LOADER,))
    (change,) = [c for c in changes_for(source, "GD-RUN-DATALOADER", config=few).changes if c.kind == "loader"]
    kwargs = dict(change.ops[0].kwargs)
    assert kwargs["num_workers"] == "2"  # 6 CPUs over 2 ranks, one left for the training process
    assert kwargs["pin_memory"] == "True" and kwargs["prefetch_factor"] == "4"


def test_info_findings_and_tuned_scripts_get_no_patch() -> None:
    source = SCRIPT.read_text(encoding="utf-8")
    plan = plan_fix(locate(source), [finding("GD-RUN-DATALOADER", Severity.INFO)], CONFIG)
    assert not plan.changes and not plan.advice
    assert not changes_for(source, "GD-RUN-MEM-LEAK").changes  # no code fix for it here


def test_a_training_step_in_a_helper_gets_text_advice() -> None:
    source = (
        "import torch\n"
        "def step(model, batch, opt):\n"
        "    loss = model(batch).sum()\n"
        "    loss.backward()\n"
        "    opt.step()\n"
    )
    plan = changes_for(source, "GD-RUN-DATALOADER", "GD-RUN-FP32-COMPUTE")
    assert not plan.changes
    assert {a.code for a in plan.advice} == {"GD-RUN-DATALOADER", "GD-RUN-FP32-COMPUTE"}
    assert all(a.fix.startswith("the fix for") and a.reason for a in plan.advice)


def test_item_kept_when_the_sum_is_used_as_a_number() -> None:
    source = SCRIPT.read_text(encoding="utf-8").replace('print(f"epoch {epoch} step {i} loss {running / 10:.4f}")',
                                                        "print(running / 10)")
    plan = changes_for(source, "GD-RUN-HOST-SYNC")
    assert not plan.changes and plan.advice  # print(tensor) would print differently: no patch


def test_already_autocast_gets_no_bf16() -> None:
    source = SCRIPT.read_text(encoding="utf-8").replace(
        "            outputs = model(images)\n            loss = criterion(outputs, targets)\n",
        "            with torch.autocast('cuda'):\n                outputs = model(images)\n"
        "                loss = criterion(outputs, targets)\n")
    plan = changes_for(source, "GD-RUN-FP32-COMPUTE")
    assert "bf16" not in [c.kind for c in plan.changes]
    assert any("bf16" in a.reason for a in plan.advice)


def test_a_statement_sharing_its_line_is_left_alone() -> None:
    source = SCRIPT.read_text(encoding="utf-8").replace(
        "    model = nn.Sequential(", "    torch.manual_seed(0); model = nn.Sequential(")
    plan = changes_for(source, "GD-RUN-CUDNN-BENCHMARK")
    fixed, kept, dropped = apply_located(source, plan.changes)
    assert fixed == source and not kept and [c.kind for c in dropped] == ["cudnn_benchmark"]


def test_a_helper_loop_is_followed_to_its_call_site_and_kwargs_merge(golden) -> None:
    source = (SCRIPT.parent / "helper_loop.py").read_text(encoding="utf-8")
    found = locate(source)
    assert (found.model, found.model_outer) == ("model", "model")
    assert found.model_assign is not None and found.model_assign.lineno == 31  # not the one under `if`
    plan = changes_for(source, "GD-RUN-DATALOADER", "GD-RUN-CHANNELS-LAST", "GD-RUN-CUDNN-BENCHMARK")
    assert [c.kind for c in plan.changes] == ["loader", "channels_last", "cudnn_benchmark"] and not plan.advice
    fixed, _, dropped = apply_located(source, plan.changes)
    assert not dropped
    ast.parse(fixed)
    # **train_kwargs may hold num_workers already: the new values are merged into it, never passed twice
    assert 'DataLoader(data, **{**train_kwargs, "num_workers": 8, "pin_memory": True' in fixed
    golden("fix/helper_loop.diff", unified_diff(source, fixed, "helper_loop.py"))


def test_fp16_with_a_grad_scaler_in_order_on_a_gpu_without_bf16(golden) -> None:
    source = SCRIPT.read_text(encoding="utf-8").replace(
        "            optimizer.step()\n",
        "            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)\n            optimizer.step()\n")
    v100 = dataclasses.replace(CONFIG, device_name="Tesla V100-SXM2-32GB")
    plan = changes_for(source, "GD-RUN-FP32-COMPUTE", config=v100)
    (change,) = [c for c in plan.changes if c.kind == "fp16"]
    assert change.precision
    fixed, _, dropped = apply_located(source, [change])
    assert not dropped
    ast.parse(fixed)
    order = [fixed.index(s) for s in ('scaler = torch.amp.GradScaler("cuda")', "dtype=torch.float16",
                                      "scaler.scale(loss).backward()", "scaler.unscale_(optimizer)",
                                      "clip_grad_norm_", "scaler.step(optimizer)", "scaler.update()")]
    assert order == sorted(order)
    golden("fix/fp16.diff", unified_diff(source, fixed, "conv_ddp.py"))


def test_item_in_a_str_format_field_with_a_spec_is_summed_on_the_device() -> None:
    # the shape of pytorch/examples' vae and super_resolution
    source = SCRIPT.read_text(encoding="utf-8").replace(
        'print(f"epoch {epoch} step {i} loss {running / 10:.4f}")',
        'print("epoch {} loss {:.4f}".format(epoch, running / 10))')
    (change,) = changes_for(source, "GD-RUN-HOST-SYNC").changes
    fixed, _, dropped = apply_located(source, [change])
    assert not dropped and "running += loss.detach()" in fixed
    unformatted = source.replace("{:.4f}", "{}")  # str(tensor) is not str(float): no patch
    assert not changes_for(unformatted, "GD-RUN-HOST-SYNC").changes


def test_a_model_assigned_in_both_arms_of_an_if_is_patched_after_the_if() -> None:
    # the shape of pytorch/examples' word_language_model
    source = SCRIPT.read_text(encoding="utf-8").replace(
        "    model = nn.Sequential(",
        "    if epochs > 1:\n        model = nn.Linear(3, 10)\n    else:\n        model = nn.Sequential(")
    found = locate(source)
    assert isinstance(found.model_assign, ast.If)
    (change,) = changes_for(source, "GD-RUN-LAUNCH-BOUND").changes
    fixed, _, dropped = apply_located(source, [change])
    assert not dropped
    assert "        model = nn.Sequential(nn.Conv2d(3, 16, 3), nn.ReLU(), nn.Flatten(), nn.Linear(16 * 30 * 30, 10)).to(device)\n" \
           "    # gpudoctor fix: GD-RUN-LAUNCH-BOUND — fuse the many small kernels of a launch-bound step\n" \
           "    model.compile()\n" in fixed
