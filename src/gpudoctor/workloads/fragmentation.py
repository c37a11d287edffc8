"""Variable-sized activations under a memory cap: the caching allocator fragments and retries.

Each step processes a batch of random sequence length (as with unbucketed text) and keeps the
last few feature maps for a moving statistic; a per-process memory cap (as on a shared GPU) makes
the allocator free its cache and retry when no cached block fits. Planted: fragmentation.

    python -m gpudoctor.workloads.fragmentation [--size tiny|small|medium] [--steps N]
"""

from __future__ import annotations

import argparse
import collections

import torch
import torch.nn as nn
import torch.nn.functional as F

SIZES = {  # memory cap, max tokens per batch, width
    "tiny": dict(cap_gib=0.5, tokens=4096, width=256),
    "small": dict(cap_gib=4.0, tokens=65536, width=1024),
    "medium": dict(cap_gib=8.0, tokens=131072, width=1024),
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", choices=SIZES, default="small")
    parser.add_argument("--steps", type=int, default=60)
    args = parser.parse_args()
    cfg = SIZES[args.size]
    cuda = torch.cuda.is_available()
    device = torch.device("cuda" if cuda else "cpu")
    torch.manual_seed(0)
    if cuda:
        total = torch.cuda.get_device_properties(device).total_memory
        torch.cuda.set_per_process_memory_fraction(min(1.0, cfg["cap_gib"] * 2**30 / total))
    w = cfg["width"]
    model = nn.Sequential(nn.Linear(w, 4 * w), nn.GELU(), nn.Linear(4 * w, w)).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    amp_dtype = torch.bfloat16 if cuda else torch.float32
    kept: collections.deque = collections.deque(maxlen=3)
    gen = torch.Generator().manual_seed(1)

    for step in range(args.steps):
        # random length between 1/8 and all of the token budget: every step a different size
        n = int(cfg["tokens"] * (0.125 + 0.875 * torch.rand((), generator=gen).item()))
        x = torch.randn(n, w, device=device)
        with torch.autocast(device.type, dtype=amp_dtype, enabled=cuda):
            h = model(x)
            loss = F.mse_loss(h.float(), x)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        kept.append(h.detach().float() * 1.0)  # odd-sized blocks that outlive the step
        if (step + 1) % 20 == 0:
            print(f"step {step + 1} tokens {n} loss {loss.item():.4f}", flush=True)


if __name__ == "__main__":
    main()
