"""A ResNet-style conv net trained in plain fp32 with the data already on the GPU.

No autocast, no channels_last, cudnn.benchmark off: the GPU is busy, but on fp32 (TF32 only
where PyTorch enables it by default), far from its tensor-core throughput. Planted:
compute-bound in fp32.

    python -m gpudoctor.workloads.fp32_convnet [--size tiny|small|medium] [--steps N]
"""

from __future__ import annotations

import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F

SIZES = {
    "tiny": dict(batch=8, res=16, width=8),
    "small": dict(batch=256, res=64, width=128),
    "medium": dict(batch=256, res=96, width=128),
}


class Residual(nn.Module):
    def __init__(self, c: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(c, c, 3, 1, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(c)
        self.conv2 = nn.Conv2d(c, c, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(c)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.relu(x + self.bn2(self.conv2(F.relu(self.bn1(self.conv1(x))))))


def make_model(w: int) -> nn.Module:
    return nn.Sequential(nn.Conv2d(3, w, 3, 1, 1), nn.ReLU(), Residual(w), Residual(w),
                         nn.Conv2d(w, 2 * w, 3, 2, 1), nn.ReLU(), Residual(2 * w), Residual(2 * w),
                         nn.Conv2d(2 * w, 4 * w, 3, 2, 1), nn.ReLU(), Residual(4 * w),
                         nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(4 * w, 100))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", choices=SIZES, default="small")
    parser.add_argument("--steps", type=int, default=60)
    args = parser.parse_args()
    cfg = SIZES[args.size]
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    torch.manual_seed(0)

    model = make_model(cfg["width"]).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    x_all = torch.randn(4, cfg["batch"], 3, cfg["res"], cfg["res"], device=device)
    y_all = torch.randint(0, 100, (4, cfg["batch"]), device=device)

    for step in range(args.steps):
        loss = F.cross_entropy(model(x_all[step % 4]), y_all[step % 4])
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        if (step + 1) % 20 == 0:
            print(f"step {step + 1} loss {loss.item():.4f}", flush=True)


if __name__ == "__main__":
    main()
