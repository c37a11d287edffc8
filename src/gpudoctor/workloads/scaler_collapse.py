"""fp16 autocast with a GradScaler, and a feature norm whose gradient is infinite at zero.

Padded rows are all zeros, ``sqrt(sum(h*h))`` of a zero row has an infinite derivative, so every
step's gradients hold inf/NaN: the scaler skips every optimizer step and halves its scale until it
collapses, while the loss itself looks finite. Planted: GradScaler collapse.

    python -m gpudoctor.workloads.scaler_collapse [--size tiny|small|medium] [--steps N]
"""

from __future__ import annotations

import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F

SIZES = {
    "tiny": dict(batch=64, width=64),
    "small": dict(batch=2048, width=2048),
    "medium": dict(batch=4096, width=4096),
}


class NormHead(nn.Module):
    def __init__(self, w: int) -> None:
        super().__init__()
        self.body = nn.Sequential(nn.Linear(w, w), nn.GELU(), nn.Linear(w, w))
        self.head = nn.Linear(w + 1, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.body(x) * (x.abs().sum(1, keepdim=True) > 0)  # padded rows stay zero
        norm = torch.sqrt((h.float() * h.float()).sum(1, keepdim=True))  # d/dh is inf at 0
        return self.head(torch.cat([h, norm.to(h.dtype)], 1))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", choices=SIZES, default="small")
    parser.add_argument("--steps", type=int, default=60)
    args = parser.parse_args()
    cfg = SIZES[args.size]
    cuda = torch.cuda.is_available()
    device = torch.device("cuda" if cuda else "cpu")
    torch.manual_seed(0)
    w = cfg["width"]
    model = NormHead(w).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    scaler = torch.amp.GradScaler(device.type)
    amp_dtype = torch.float16 if cuda else torch.bfloat16
    x = torch.randn(cfg["batch"], w, device=device)
    x[-cfg["batch"] // 8:] = 0  # padding rows
    y = torch.randint(0, 10, (cfg["batch"],), device=device)

    for step in range(args.steps):
        with torch.autocast(device.type, dtype=amp_dtype):
            loss = F.cross_entropy(model(x), y)
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
        opt.zero_grad(set_to_none=True)
        if (step + 1) % 20 == 0:
            print(f"step {step + 1} loss {loss.item():.4f} scale {scaler.get_scale():g}", flush=True)


if __name__ == "__main__":
    main()
