"""CTR model training. Written to scale out to all visible GPUs on the box."""
import argparse
import os
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

from model import CTRModel, FeatureSpec

SMOKE = os.environ.get("SMOKE") == "1"
MICRO_BATCH, ACCUM = (8, 2) if SMOKE else (1024, 12)


def make_batches(spec, n, device, gen):
    """Synthetic impression logs, materialised on the device up front."""
    out = []
    for _ in range(n):
        feats = {k: torch.randn(MICRO_BATCH, w, generator=gen).to(device) for k, w in spec.widths.items()}
        label = (torch.rand(MICRO_BATCH, generator=gen) < 0.25).float().to(device)
        out.append((feats, label))
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=300)
    args = ap.parse_args()
    torch.manual_seed(0)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    gen = torch.Generator().manual_seed(0)

    spec = FeatureSpec() if not SMOKE else FeatureSpec(n_scalar=4, n_vector=2, vector_width=3)
    model = CTRModel(spec).to(device)
    if device == "cuda":
        model = nn.DataParallel(model)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3, fused=(device == "cuda"))
    batches = make_batches(spec, 16, device, gen)

    t0, k = time.time(), 0
    for step in range(1, args.steps + 1):
        opt.zero_grad(set_to_none=True)
        for _ in range(ACCUM):
            feats, label = batches[k % len(batches)]
            k += 1
            logits = model(feats)
            loss = F.binary_cross_entropy_with_logits(logits, label) / ACCUM
            loss.backward()
        opt.step()
        if step % 50 == 0 or step == 1:
            print(f"step {step:5d} loss {loss.item() * ACCUM:.4f} ({time.time() - t0:.1f}s)", flush=True)


if __name__ == "__main__":
    main()
