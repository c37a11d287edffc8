"""A small MLP trained with batch size 8: hundreds of microsecond-long kernels per step.

Each kernel finishes before the host can launch the next one, so the GPU idles between them:
CPU launch-overhead bound. Data is on the device, no host syncs. Planted: launch bound.

    python -m gpudoctor.workloads.tiny_batch [--size tiny|small|medium] [--steps N]
"""

from __future__ import annotations

import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F

SIZES = {
    "tiny": dict(batch=8, width=128, depth=4),
    "small": dict(batch=8, width=512, depth=8),
    "medium": dict(batch=8, width=1024, depth=12),
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

    layers: list[nn.Module] = []
    for _ in range(cfg["depth"]):
        layers += [nn.Linear(w, w), nn.LayerNorm(w), nn.ReLU()]
    model = nn.Sequential(*layers, nn.Linear(w, 10)).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, foreach=False)  # one launch per tensor
    x_all = torch.randn(16, cfg["batch"], w, device=device)
    y_all = torch.randint(0, 10, (16, cfg["batch"]), device=device)

    for step in range(args.steps):
        loss = F.cross_entropy(model(x_all[step % 16]), y_all[step % 16])
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        if (step + 1) % 50 == 0:
            print(f"step {step + 1} loss {loss.item():.4f}", flush=True)


if __name__ == "__main__":
    main()
