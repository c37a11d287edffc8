"""A pre-loaded float dataset sliced into batches and copied from pageable memory, blocking.

The data sits in RAM as one float32 tensor (not pinned); each step slices a batch and calls
``.to(device)`` without ``non_blocking``: the host waits for every copy, at pageable bandwidth.
The model is otherwise tuned (bf16 autocast, channels_last). Planted: pageable H2D copies.

    python -m gpudoctor.workloads.pageable_copies [--size tiny|small|medium] [--steps N]
"""

from __future__ import annotations

import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F

SIZES = {  # batches kept in RAM, batch, resolution, width
    "tiny": dict(batches=4, batch=16, res=64, width=8),
    "small": dict(batches=8, batch=256, res=128, width=16),
    "medium": dict(batches=8, batch=512, res=128, width=32),
}


def make_model(width: int) -> nn.Module:
    w = width
    return nn.Sequential(nn.Conv2d(3, w, 3, 2, 1), nn.ReLU(), nn.Conv2d(w, 2 * w, 3, 2, 1),
                         nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(2 * w, 10))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", choices=SIZES, default="small")
    parser.add_argument("--steps", type=int, default=60)
    args = parser.parse_args()
    cfg = SIZES[args.size]
    cuda = torch.cuda.is_available()
    device = torch.device("cuda" if cuda else "cpu")
    torch.manual_seed(0)
    torch.backends.cudnn.benchmark = True

    n = cfg["batches"] * cfg["batch"]
    data = torch.randn(n, 3, cfg["res"], cfg["res"])  # pageable host memory
    labels = torch.randint(0, 10, (n,))
    model = make_model(cfg["width"]).to(device, memory_format=torch.channels_last)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    amp_dtype = torch.bfloat16 if cuda else torch.float32

    for step in range(args.steps):
        i = step % cfg["batches"] * cfg["batch"]
        x = data[i:i + cfg["batch"]].to(device)  # blocking copy from pageable memory
        y = labels[i:i + cfg["batch"]].to(device)
        with torch.autocast(device.type, dtype=amp_dtype, enabled=cuda):
            loss = F.cross_entropy(model(x.contiguous(memory_format=torch.channels_last)), y)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        if (step + 1) % 20 == 0:
            print(f"step {step + 1} loss {loss.item():.4f}", flush=True)


if __name__ == "__main__":
    main()
