"""Deep pre-LN residual MLP on a synthetic teacher task (depth ablation, run 07)."""
import argparse
import os
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

from optim import warmup_cosine

SMOKE = os.environ.get("SMOKE") == "1"
CFG = dict(d=32, depth=2, batch=16, n_out=10) if SMOKE else dict(d=256, depth=40, batch=4096, n_out=100)


class Block(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.norm = nn.LayerNorm(d)
        self.fc1 = nn.Linear(d, 4 * d)
        self.fc2 = nn.Linear(4 * d, d)
        self.gate = nn.Parameter(torch.zeros(d))   # rezero-style residual gate

    def forward(self, x):
        return x + self.gate * self.fc2(F.gelu(self.fc1(self.norm(x))))


class DeepMLP(nn.Module):
    def __init__(self, d, depth, n_out):
        super().__init__()
        self.inp = nn.Linear(d, d)
        self.blocks = nn.ModuleList(Block(d) for _ in range(depth))
        self.norm = nn.LayerNorm(d)
        self.out = nn.Linear(d, n_out)

    def forward(self, x):
        x = self.inp(x)
        for b in self.blocks:
            x = b(x)
        return self.out(self.norm(x))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=300)
    args = ap.parse_args()
    torch.manual_seed(0)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    d, depth, batch, n_out = CFG["d"], CFG["depth"], CFG["batch"], CFG["n_out"]

    teacher = nn.Linear(d, n_out).to(device).requires_grad_(False)
    model = DeepMLP(d, depth, n_out).to(device)
    decay = [p for n, p in model.named_parameters() if p.ndim >= 2]
    no_decay = [p for n, p in model.named_parameters() if p.ndim < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.05}, {"params": no_decay, "weight_decay": 0.0}],
                lr=1e-3, betas=(0.9, 0.95), fused=(device == "cuda"))
    sched = warmup_cosine(opt, warmup=20, total=args.steps)

    t0 = time.time()
    for step in range(args.steps):
        x = torch.randn(batch, d, device=device)
        with torch.no_grad():
            y = teacher(x).argmax(-1)
        with torch.autocast(device_type=device, dtype=torch.bfloat16):
            loss = F.cross_entropy(model(x).float(), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        sched.step()
        if step % 50 == 0 or step == args.steps - 1:
            print(f"step {step:4d} loss {loss.item():.4f} lr {sched.get_last_lr()[0]:.2e} "
                  f"({time.time() - t0:.1f}s)", flush=True)


if __name__ == "__main__":
    main()
