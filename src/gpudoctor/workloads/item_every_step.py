"""A deep MLP whose loop reads metrics on the host every step.

``loss.item()``, an accuracy moved with ``.cpu()``: each waits for the GPU to finish, so the host
can never queue the next step ahead and the GPU idles while Python prepares it. Data is generated
on the device; bf16 autocast. Planted: host-sync bound.

    python -m gpudoctor.workloads.item_every_step [--size tiny|small|medium] [--steps N]
"""

from __future__ import annotations

import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F

SIZES = {
    "tiny": dict(batch=256, width=256, depth=4),
    "small": dict(batch=4096, width=4096, depth=8),
    "medium": dict(batch=8192, width=4096, depth=12),
}


def make_model(width: int, depth: int) -> nn.Module:
    layers: list[nn.Module] = []
    for _ in range(depth):
        layers += [nn.Linear(width, width), nn.GELU()]
    return nn.Sequential(*layers, nn.Linear(width, 10))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", choices=SIZES, default="small")
    parser.add_argument("--steps", type=int, default=60)
    args = parser.parse_args()
    cfg = SIZES[args.size]
    cuda = torch.cuda.is_available()
    device = torch.device("cuda" if cuda else "cpu")
    torch.manual_seed(0)

    model = make_model(cfg["width"], cfg["depth"]).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    amp_dtype = torch.bfloat16 if cuda else torch.float32
    x_all = torch.randn(4, cfg["batch"], cfg["width"], device=device)
    y_all = torch.randint(0, 10, (4, cfg["batch"]), device=device)

    losses, accs = [], []
    for step in range(args.steps):
        x, y = x_all[step % 4], y_all[step % 4]
        with torch.autocast(device.type, dtype=amp_dtype, enabled=cuda):
            out = model(x)
            loss = F.cross_entropy(out, y)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        losses.append(loss.item())  # host sync
        accs.append((out.argmax(1) == y).float().mean().cpu())  # host sync
        if (step + 1) % 20 == 0:
            print(f"step {step + 1} loss {sum(losses[-20:]) / 20:.4f} acc {accs[-1]:.3f}", flush=True)


if __name__ == "__main__":
    main()
