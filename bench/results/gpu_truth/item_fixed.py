"""A deep MLP trained nanoGPT-style, except that the loop reads metrics on the host every step.

Batches are cut from a long in-memory recording on the host (``get_batch``: random windows,
``torch.stack``, pinned, ``non_blocking`` copy), as nanoGPT and many hand-rolled loops do. That
host work is free when the host runs ahead of the GPU: it prepares batch n+1 while the GPU still
computes step n. Here ``loss.item()`` after ``backward()`` and an accuracy moved with ``.cpu()``
after ``optimizer.step()`` wait for the GPU to finish, so every step the GPU sits idle while the
host cuts the next batch and queues the next forward. Planted: host-sync bound.

(An earlier version had no host work between the syncs and the next step's kernels; on an H200
its GPU work, 8.3 ms a step, hid the syncs almost completely: 3.8% of the step, recorded in
``tests/fixtures/runs/item_every_step-gpu-bound/``.)

    python -m gpudoctor.workloads.item_every_step [--size tiny|small|medium] [--steps N]
"""

from __future__ import annotations

import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F

SIZES = {  # batch, input window, width, depth, length of the recording
    "tiny": dict(batch=64, window=64, width=128, depth=2, length=200_000),
    "small": dict(batch=4096, window=256, width=4096, depth=8, length=4_000_000),
    "medium": dict(batch=8192, window=256, width=4096, depth=12, length=8_000_000),
}


def make_model(window: int, width: int, depth: int) -> nn.Module:
    layers: list[nn.Module] = [nn.Linear(window, width), nn.GELU()]
    for _ in range(depth - 1):
        layers += [nn.Linear(width, width), nn.GELU()]
    return nn.Sequential(*layers, nn.Linear(width, 10))


def get_batch(signal: torch.Tensor, labels: torch.Tensor, batch: int, window: int,
              device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """Random windows of the recording, assembled on the host, copied asynchronously."""
    ix = torch.randint(len(signal) - window, (batch,))
    x = torch.stack([signal[i:i + window] for i in ix.tolist()])  # host work, one slice per sample
    y = labels[ix]
    if device.type == "cuda":
        return (x.pin_memory().to(device, non_blocking=True),
                y.pin_memory().to(device, non_blocking=True))
    return x, y


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", choices=SIZES, default="small")
    parser.add_argument("--steps", type=int, default=60)
    args = parser.parse_args()
    cfg = SIZES[args.size]
    cuda = torch.cuda.is_available()
    device = torch.device("cuda" if cuda else "cpu")
    torch.manual_seed(0)

    signal = torch.randn(cfg["length"])
    labels = torch.randint(0, 10, (cfg["length"],))
    model = make_model(cfg["window"], cfg["width"], cfg["depth"]).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    amp_dtype = torch.bfloat16 if cuda else torch.float32

    losses, accs = [], []
    for step in range(args.steps):
        x, y = get_batch(signal, labels, cfg["batch"], cfg["window"], device)
        with torch.autocast(device.type, dtype=amp_dtype, enabled=cuda):
            out = model(x)
            loss = F.cross_entropy(out, y)
        loss.backward()
        losses.append(loss.detach())  # fixed by hand: stays on the GPU
        opt.step()
        opt.zero_grad(set_to_none=True)
        accs.append((out.argmax(1) == y).float().mean())  # fixed by hand: stays on the GPU
        if (step + 1) % 20 == 0:
            print(f"step {step + 1} loss {torch.stack(losses[-20:]).mean().item():.4f} acc {accs[-1].item():.3f}", flush=True)


if __name__ == "__main__":
    main()
