"""What the GPU test tier (``pytest -m gpu``, run on a device machine) shares."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest


def leak_site_figures(run_dir: Path) -> dict:
    """What a run directory recorded of a leak's sites: the sites (``leak-sites-rank0.json``), the
    profiler window, the steps that ran with allocation history on and their step times, and the
    median of the other steady steps (past warm-up, outside the window)."""
    import statistics

    from gpudoctor.records.rundir import load_run

    path = run_dir / "leak-sites-rank0.json"
    sites = json.loads(path.read_text())["data"] if path.exists() else None
    run = load_run(run_dir)
    steps = {s.step: s.step_ms for s in run.steps[0]}
    history = sites.get("history_steps") if sites else None
    recorded = set(range(history[0], history[1] + 1)) if history else set()
    window = tuple(run.manifest.profile_window)
    others = [ms for step, ms in steps.items() if step >= 5 and step not in recorded
              and not (window and window[0] <= step <= window[1])]
    return {"leak_sites": sites, "profile_window": window, "recorded_steps": sorted(recorded),
            "step_ms_history_on": {step: steps[step] for step in sorted(recorded) if step in steps},
            "step_ms_median_other_steady": statistics.median(others) if others else None}


def assert_leak_site_named(leak: list, figures: dict, history_steps: list[int]) -> None:
    """LEAK_TRAIN's leak named at its line (``remember``, 1 MiB a step) from allocation history
    recorded clear of the profiler window, and those steps (``history_steps``, from the run's
    statistics) left out of the steady figures."""
    sites, window = figures["leak_sites"], figures["profile_window"]
    assert leak, "no GD-RUN-MEM-LEAK finding"
    assert sites is not None, "no leak-sites-rank0.json: the history was never turned on"
    top = sites["sites"][0]
    assert "train.py" in top["site"] and top["site"].endswith("remember"), sites
    grew, span = top["bytes_to"] - top["bytes_from"], sites["step_to"] - sites["step_from"]
    assert abs(grew / span - (1 << 20)) < 0.05 * (1 << 20), (grew, span)  # 1 MiB per step, as planted
    assert "remember" in leak[0]["title"]
    # the history (on from the boundary before step_from) stayed out of the profiler window
    assert window and sites["step_to"] < window[0] - 1, (sites, window)
    assert tuple(sites["history_steps"]) == (sites["step_from"], sites["step_to"]), sites
    assert list(history_steps) == figures["recorded_steps"], history_steps


def need_gpu() -> None:
    """Skip the calling test where torch sees no CUDA GPU."""
    import torch

    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")


def save_figures(name: str, data: dict) -> None:
    """Print a GPU test's figures (seen with ``-s``) and, with ``JOB_OUT`` set (the GPU jobs), write
    them there as ``name`` (JSON) for the results."""
    print(json.dumps(data, indent=2))
    out = os.environ.get("JOB_OUT")
    if out:
        Path(out, name).write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")


# A training script that keeps 1 MiB of activations every step (the planted leak is ``remember``):
# 32 steps an epoch, 10 epochs, so any ``--steps`` up to 320 stops it first.
LEAK_TRAIN = """
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset
model = nn.Sequential(*[nn.Linear(1024, 1024) for _ in range(4)]).cuda()
opt = torch.optim.AdamW(model.parameters())
data = DataLoader(TensorDataset(torch.randn(2048, 1024)), batch_size=64, pin_memory=True)
history = []


def remember(out):
    history.append(out.detach().repeat(4, 1))  # the planted leak: 1 MiB kept every step


for epoch in range(10):
    for (x,) in data:
        x = x.cuda(non_blocking=True)
        out = model(x)
        loss = out.square().mean()
        remember(out)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
"""
