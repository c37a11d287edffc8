#!/usr/bin/env python
"""Fine-tune projection towers of a dual encoder on frozen features (InfoNCE, in-batch negatives)."""
import argparse
import gc
import os
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

from dataset import FeatureStore, PairManifest

SMOKE = os.environ.get("SMOKE") == "1"

# imports are done: move module-level objects out of the collector's view (copy-on-write friendly)
gc.freeze()


def tower(dim_in, hidden, dim_out, depth):
    layers = [nn.Linear(dim_in, hidden), nn.GELU()]
    for _ in range(depth - 1):
        layers += [nn.Linear(hidden, hidden), nn.GELU()]
    layers.append(nn.Linear(hidden, dim_out))
    return nn.Sequential(*layers)


class DualEncoder(nn.Module):
    def __init__(self, dim_in, hidden, dim_out, depth):
        super().__init__()
        self.q = tower(dim_in, hidden, dim_out, depth)
        self.p = tower(dim_in, hidden, dim_out, depth)
        self.log_temp = nn.Parameter(torch.tensor(2.3))

    def forward(self, qf, pf):
        q = F.normalize(self.q(qf), dim=-1)
        p = F.normalize(self.p(pf), dim=-1)
        return q @ p.t() * self.log_temp.exp()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--batch-size", type=int, default=16 if SMOKE else 8192)
    ap.add_argument("--log-every", type=int, default=50)
    args = ap.parse_args()
    torch.manual_seed(0)
    device = "cuda" if torch.cuda.is_available() else "cpu"

    n_rows, dim_in = (1024, 32) if SMOKE else (200_000, 512)
    hidden, dim_out, depth = (64, 16, 2) if SMOKE else (2048, 256, 4)
    manifest = PairManifest(n_pairs=2_000 if SMOKE else 25_000, n_rows=n_rows)
    store = FeatureStore(n_rows, dim_in, device)

    model = DualEncoder(dim_in, hidden, dim_out, depth).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.01)
    targets = torch.arange(args.batch_size, device=device)

    t0 = time.time()
    for step in range(1, args.steps + 1):
        q_idx, p_idx = manifest.sample(args.batch_size)
        if device == "cuda":
            q_idx, p_idx = q_idx.pin_memory(), p_idx.pin_memory()
        qf, pf = store.lookup(q_idx, p_idx)
        with torch.autocast(device_type=device, dtype=torch.bfloat16):
            logits = model(qf, pf)
        logits = logits.float()
        loss = 0.5 * (F.cross_entropy(logits, targets) + F.cross_entropy(logits.t(), targets))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        if step % args.log_every == 0 or step == 1:
            print(f"step {step:5d} loss {loss.item():.4f} ({time.time() - t0:.1f}s)", flush=True)


if __name__ == "__main__":
    main()
