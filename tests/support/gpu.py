"""What the GPU test tier (``pytest -m gpu``, run on a device machine) shares."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest


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
