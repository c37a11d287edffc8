"""A regression MLP with a learning rate far too high: the loss overflows to inf, then NaN.

fp32 plain SGD, no clipping, unnormalised targets. Planted: non-finite loss.

    python -m gpudoctor.workloads.nan_loss [--size tiny|small|medium] [--steps N]
"""

from __future__ import annotations

import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F

SIZES = {
    "tiny": dict(batch=64, width=64),
    "small": dict(batch=1024, width=1024),
    "medium": dict(batch=4096, width=2048),
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", choices=SIZES, default="small")
    parser.add_argument("--steps", type=int, default=60)
    args = parser.parse_args()
    cfg = SIZES[args.size]
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    torch.manual_seed(0)
    w = cfg["width"]
    model = nn.Sequential(nn.Linear(w, w), nn.ReLU(), nn.Linear(w, 1)).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=5.0)  # far too high for these targets
    x = torch.randn(cfg["batch"], w, device=device) * 10
    y = torch.randn(cfg["batch"], 1, device=device) * 1000  # unnormalised targets

    for step in range(args.steps):
        loss = F.mse_loss(model(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        if (step + 1) % 10 == 0:
            print(f"step {step + 1} loss {loss.item():.4g}", flush=True)


if __name__ == "__main__":
    main()
