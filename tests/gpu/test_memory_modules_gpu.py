"""On a real GPU: a leak's allocation site named without an OOM; per-module forward memory of
torchvision's ResNet-50 against a hand measurement; the stage table of that script (no DataLoader,
issue 22); --what-if checkpointing against a real checkpointed run. Figures are printed (run with -s) and, with JOB_OUT set, written as JSON."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.gpu import LEAK_TRAIN, save_figures

torch = pytest.importorskip("torch")
pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
]

MIB = 1 << 20
SRC = Path(__file__).resolve().parents[2] / "src"


RESNET_TRAIN = """
import torch
import torchvision
torch.manual_seed(0)
model = torchvision.models.resnet50().cuda()
opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
x, y = torch.randn(32, 3, 224, 224), torch.randint(0, 1000, (32,))
for step in range(4):
    xb, yb = x.cuda(non_blocking=True), y.cuda()
    loss = torch.nn.functional.cross_entropy(model(xb), yb)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
"""



def _memory_run(tmp_path: Path, script: str, *args: str):
    (tmp_path / "train.py").write_text(script, encoding="utf-8")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in (str(SRC), os.environ.get("PYTHONPATH", "")) if p))
    result = subprocess.run(
        [sys.executable, "-m", "gpudoctor", "memory", "run", *args, "--json", "--out", "rd", "--",
         sys.executable, "train.py"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=240,
    )
    assert result.stdout.strip(), result.stderr
    return result, json.loads(result.stdout)


def test_leak_site_is_named_without_an_oom(tmp_path) -> None:
    result, payload = _memory_run(tmp_path, LEAK_TRAIN, "--steps", "30", "--stages", "3")
    assert result.returncode == 0, result.stderr
    assert not (tmp_path / "rd" / "oom.json").exists()
    memory = payload["memory"]
    leak = [f for f in memory["findings"] if f["code"] == "GD-RUN-MEM-LEAK"]
    sites = memory["leak_sites"]
    save_figures("leak_site.json", {"finding": leak, "leak_sites": sites})
    assert leak, memory["findings"]
    assert "train.py" in sites["sites"][0]["site"] and sites["sites"][0]["site"].endswith("remember"), sites
    grew = sites["sites"][0]["bytes_to"] - sites["sites"][0]["bytes_from"]
    steps = sites["step_to"] - sites["step_from"]
    assert abs(grew / steps - MIB) < 0.05 * MIB, (grew, steps)  # 1 MiB per step, as planted
    assert "remember" in leak[0]["title"]


def _hand_module_memory(model, x, y, opt) -> dict[str, tuple[int, int]]:
    """Step 0 trained in full; then one step-1 forward per module with only that module hooked:
    reset the peak before its forward, read it after (what one would write by hand)."""
    loss = torch.nn.functional.cross_entropy(model(x), y)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    del loss
    figures = {}
    for name, module in model.named_modules():
        state = {}

        def pre(m, args, state=state):
            torch.cuda.reset_peak_memory_stats()
            state["before"] = torch.cuda.memory_allocated()

        def post(m, args, out, state=state):
            state["peak"] = torch.cuda.max_memory_allocated() - state["before"]
            state["kept"] = torch.cuda.memory_allocated() - state["before"]

        handles = [module.register_forward_pre_hook(pre), module.register_forward_hook(post)]
        out = model(x)
        for h in handles:
            h.remove()
        del out
        figures[name] = (state["kept"], state["peak"])
    return figures


def test_resnet50_module_memory_within_15_percent_of_a_hand_measurement(tmp_path) -> None:
    torchvision = pytest.importorskip("torchvision")
    from gpudoctor.records.base import read_jsonl
    from gpudoctor.records.memory import ModuleMemory
    from gpudoctor.records.rundir import KIND_MODULES, modules_file

    result, payload = _memory_run(tmp_path, RESNET_TRAIN, "--modules", "--steps", "4", "--stages", "2")
    assert result.returncode == 0, result.stderr
    lines = {m.name: m for m in read_jsonl(tmp_path / "rd" / modules_file(0), ModuleMemory, kind=KIND_MODULES)}
    assert payload["memory"]["modules"]["model"]["type"] == "ResNet"

    torch.manual_seed(0)
    model = torchvision.models.resnet50().cuda()
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    x = torch.randn(32, 3, 224, 224).cuda()
    y = torch.randint(0, 1000, (32,)).cuda()
    hand = _hand_module_memory(model, x, y, opt)
    assert set(hand) == set(lines), set(hand) ^ set(lines)
    compared, worst = [], 0.0
    for name, (kept, peak) in hand.items():
        ours = lines[name]
        for what, mine, theirs in (("peak", ours.peak_bytes, peak), ("kept", ours.kept_bytes, kept)):
            if theirs >= 4 * MIB:  # below 4 MiB a module's figure is allocator rounding and workspaces
                err = abs(mine - theirs) / theirs
                compared.append({"module": name or "(model)", "what": what, "gpudoctor": mine, "hand": theirs,
                                 "rel_err": round(err, 4)})
                worst = max(worst, err)
    save_figures("resnet50_modules_vs_hand.json", {
        "model": "torchvision resnet50, batch 32, 224x224, fp32, SGD momentum, step 1",
        "modules": len(hand), "figures_compared": len(compared), "worst_rel_err": round(worst, 4),
        "model_line": {"gpudoctor": [lines[""].kept_bytes, lines[""].peak_bytes], "hand": list(hand[""])},
        "compared": sorted(compared, key=lambda c: -c["rel_err"])[:20]})
    assert len(compared) > 50
    assert worst <= 0.15, sorted(compared, key=lambda c: -c["rel_err"])[:5]


def test_resnet50_without_a_dataloader_stages_hold_the_right_bytes(tmp_path) -> None:
    # issue 22: the model line held step 0's activations (2.7 GiB), forward read 0 B, and batch,
    # activations and gradients were "not seen"
    torchvision = pytest.importorskip("torchvision")
    result, payload = _memory_run(tmp_path, RESNET_TRAIN, "--modules", "--steps", "4", "--stages", "2")
    assert result.returncode == 0, result.stderr
    memory = payload["memory"]
    rows = memory["rows"]
    assert [(r["stage"], r["step"]) for r in rows] == [
        ("model", 0), ("batch", 0), ("forward", 0), ("zero_grad", 0), ("loss", 0), ("backward", 0),
        ("optimizer", 0),
        ("batch", 1), ("forward", 1), ("zero_grad", 1), ("loss", 1), ("backward", 1), ("optimizer", 1),
    ]
    model = torchvision.models.resnet50()
    weights = sum(t.numel() * t.element_size() for t in (*model.parameters(), *model.buffers()))
    params = sum(p.numel() * p.element_size() for p in model.parameters())
    batch = 32 * 3 * 224 * 224 * 4 + 32 * 8

    # by hand: what a step-1 forward keeps (the activations), after one full step
    model = model.cuda()
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    x = torch.randn(32, 3, 224, 224).cuda()
    y = torch.randint(0, 1000, (32,)).cuda()
    loss = torch.nn.functional.cross_entropy(model(x), y)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    del loss
    before = torch.cuda.memory_allocated()
    out = model(x)
    hand = torch.cuda.memory_allocated() - before
    del out

    parts = memory["parts"]
    forward = [r["delta_bytes"] for r in rows if r["stage"] == "forward"]
    save_figures("resnet50_no_loader_stages.json", {
        "command": "memory run --modules --steps 4 --stages 2 (torchvision resnet50, batch 32, no DataLoader)",
        "rows": [{k: r[k] for k in ("step", "stage", "allocated_bytes", "delta_bytes", "freed_bytes")} for r in rows],
        "parts": parts, "weights_bytes": weights, "params_bytes": params, "batch_bytes": batch,
        "hand_forward_kept_bytes": hand})
    assert weights <= rows[0]["allocated_bytes"] <= weights + 4 * MIB  # the weights, not the activations
    assert abs(parts["batch_bytes"] - batch) <= MIB
    assert parts["model_bytes"] == rows[0]["allocated_bytes"]
    for delta in forward:  # the forward rows hold the activations, within 10% of the hand figure
        assert abs(delta - hand) <= 0.10 * hand, (forward, hand)
    assert abs(parts["activation_bytes"] - hand) <= 0.10 * hand, (parts, hand)
    assert abs(parts["gradient_bytes"] - params) <= 0.10 * params, (parts, params)


def test_what_if_checkpointing_against_a_checkpointed_run() -> None:
    torchvision = pytest.importorskip("torchvision")
    from gpudoctor.memory.estimate import EstimateConfig, default_loss, estimate_memory, measure_point
    from gpudoctor.memory.inputs import batch_factory
    from gpudoctor.memory.whatif import checkpoint_blocks, what_if
    from gpudoctor.train.perf import apply_activation_checkpointing

    make = batch_factory("image:3x224x224:1000")
    config = EstimateConfig(batch_size=64, device="cuda", probe_batches=(8, 16), optimizer="sgd_momentum")
    est = estimate_memory(torchvision.models.resnet50, make, config)
    answer = what_if(est, "checkpointing", model_factory=torchvision.models.resnet50, make_batch=make,
                     config=config, loss_fn=default_loss)
    kind = type(checkpoint_blocks(torchvision.models.resnet50())[0][1]).__name__

    def checkpointed():
        model = torchvision.models.resnet50()
        apply_activation_checkpointing(model, [kind])
        return model

    plain = measure_point(torchvision.models.resnet50, make, 64, config, torch.device("cuda")).peak_allocated_bytes
    real = measure_point(checkpointed, make, 64, config, torch.device("cuda")).peak_allocated_bytes
    predicted_saving = answer.peak_before_bytes - answer.peak_after_bytes
    measured_saving = plain - real
    save_figures("what_if_checkpointing_resnet50.json", {
        "blocks": kind, "estimate_peak": answer.peak_before_bytes, "predicted_peak": answer.peak_after_bytes,
        "measured_peak_plain": plain, "measured_peak_checkpointed": real,
        "predicted_saving": predicted_saving, "measured_saving": measured_saving,
        "saving_rel_err": round(abs(predicted_saving - measured_saving) / measured_saving, 4),
        "how": answer.how})
    assert answer.after_bytes < answer.before_bytes and real < plain
