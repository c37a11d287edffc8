"""A loop that keeps tensors with their autograd graph across steps.

``epoch_loss += loss`` accumulates the graph-carrying loss, and the logits are kept for an
end-of-epoch accuracy without ``.detach()``: allocated memory grows every step until the epoch
ends (or the GPU is full). Otherwise tuned (bf16, data on the device). Planted: memory leak.

    python -m gpudoctor.workloads.leaky_loss [--size tiny|small|medium] [--steps N]
"""

from __future__ import annotations

import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F

SIZES = {
    "tiny": dict(batch=128, width=128, classes=100),
    "small": dict(batch=2048, width=2048, classes=1000),
    "medium": dict(batch=4096, width=4096, classes=1000),
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
    w, c = cfg["width"], cfg["classes"]

    model = nn.Sequential(nn.Linear(w, w), nn.GELU(), nn.Linear(w, w), nn.GELU(),
                          nn.Linear(w, c)).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    amp_dtype = torch.bfloat16 if cuda else torch.float32
    x_all = torch.randn(4, cfg["batch"], w, device=device)
    y_all = torch.randint(0, c, (4, cfg["batch"]), device=device)

    epoch_loss = 0.0
    all_logits = []
    for step in range(args.steps):
        x, y = x_all[step % 4], y_all[step % 4]
        with torch.autocast(device.type, dtype=amp_dtype, enabled=cuda):
            logits = model(x)
            loss = F.cross_entropy(logits, y)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        epoch_loss += loss  # keeps the graph: should be loss.item() or loss.detach()
        all_logits.append(logits)  # kept with its graph: should be logits.detach()
        if (step + 1) % 20 == 0:
            print(f"step {step + 1} kept {len(all_logits)} logits tensors", flush=True)
    acc = (torch.cat(all_logits).argmax(1) == y_all.repeat(args.steps // 4 + 1, 1)[:len(all_logits)].flatten()).float().mean()
    print(f"mean loss {epoch_loss.item() / args.steps:.4f} acc {acc.item():.3f}")


if __name__ == "__main__":
    main()
