"""The seeds' "basic user" CIFAR-style loop: every default left as it is.

num_workers=0 (the main process loads and augments), per-sample CPU augmentation (random crop with
padding, flip, brightness, normalise), pageable blocking copies, fp32, no cudnn.benchmark, and
``running_loss += loss.item()`` every step. Planted: data-loader bound.

    python -m gpudoctor.workloads.basic_user [--size tiny|small|medium] [--steps N]
"""

from __future__ import annotations

import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, Dataset

SIZES = {
    "tiny": dict(n=512, res=32, batch=32, width=16),
    "small": dict(n=20_000, res=32, batch=128, width=64),
    "medium": dict(n=50_000, res=32, batch=256, width=96),
}


class CifarLike(Dataset):
    """Synthetic CIFAR-sized uint8 images with per-sample CPU augmentation in ``__getitem__``."""

    def __init__(self, n: int, res: int) -> None:
        g = torch.Generator().manual_seed(0)
        self.x = torch.randint(0, 256, (n, 3, res, res), dtype=torch.uint8, generator=g)
        self.y = torch.randint(0, 10, (n,), generator=g)
        self.res = res

    def __len__(self) -> int:
        return len(self.y)

    def __getitem__(self, i: int):
        img = self.x[i].float() / 255.0
        img = F.pad(img, (4, 4, 4, 4), mode="reflect")  # RandomCrop(32, padding=4)
        top, left = torch.randint(0, 9, (2,)).tolist()
        img = img[:, top:top + self.res, left:left + self.res]
        if torch.rand(()) < 0.5:  # RandomHorizontalFlip
            img = img.flip(2)
        img = img * (0.8 + 0.4 * torch.rand(()))  # brightness jitter
        mean = torch.tensor([0.49, 0.48, 0.45]).view(3, 1, 1)
        std = torch.tensor([0.25, 0.24, 0.26]).view(3, 1, 1)
        return (img - mean) / std, self.y[i]


def make_model(width: int) -> nn.Module:
    w = width

    def block(cin: int, cout: int, stride: int) -> nn.Sequential:
        return nn.Sequential(nn.Conv2d(cin, cout, 3, stride, 1), nn.BatchNorm2d(cout), nn.ReLU())

    return nn.Sequential(block(3, w, 1), block(w, 2 * w, 2), block(2 * w, 4 * w, 2),
                         nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(4 * w, 10))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", choices=SIZES, default="small")
    parser.add_argument("--steps", type=int, default=60)
    args = parser.parse_args()
    cfg = SIZES[args.size]
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    torch.manual_seed(0)

    loader = DataLoader(CifarLike(cfg["n"], cfg["res"]), batch_size=cfg["batch"], shuffle=True)
    model = make_model(cfg["width"]).to(device)
    criterion = nn.CrossEntropyLoss()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)

    step = 0
    running_loss = 0.0
    while step < args.steps:
        for inputs, labels in loader:
            inputs, labels = inputs.to(device), labels.to(device)
            optimizer.zero_grad()
            loss = criterion(model(inputs), labels)
            loss.backward()
            optimizer.step()
            running_loss += loss.item()  # a host sync every step
            step += 1
            if step % 20 == 0:
                print(f"step {step} loss {running_loss / 20:.3f}", flush=True)
                running_loss = 0.0
            if step >= args.steps:
                break


if __name__ == "__main__":
    main()
