"""``.cuda()`` inside ``Dataset.__getitem__``: one tiny host-to-device copy per sample.

Because the dataset touches CUDA, the loader must stay at ``num_workers=0`` (CUDA cannot be used
in forked workers), so loading, per-sample copies and the default collate (stacking on the GPU)
all run in the training process. Planted: per-sample copies.

    python -m gpudoctor.workloads.cuda_in_getitem [--size tiny|small|medium] [--steps N]
"""

from __future__ import annotations

import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, Dataset

SIZES = {
    "tiny": dict(n=512, res=32, batch=64, width=16),
    "small": dict(n=20_000, res=32, batch=256, width=64),
    "medium": dict(n=50_000, res=32, batch=512, width=96),
}


class DeviceDataset(Dataset):
    def __init__(self, n: int, res: int, device: torch.device) -> None:
        g = torch.Generator().manual_seed(0)
        self.x = torch.randn(n, 3, res, res, generator=g)
        self.y = torch.randint(0, 10, (n,), generator=g)
        self.device = device

    def __len__(self) -> int:
        return len(self.y)

    def __getitem__(self, i: int):
        return self.x[i].to(self.device), self.y[i].to(self.device)  # a copy per sample


def make_model(width: int) -> nn.Module:
    w = width

    def block(cin: int, cout: int, stride: int) -> nn.Sequential:
        return nn.Sequential(nn.Conv2d(cin, cout, 3, stride, 1, bias=False), nn.BatchNorm2d(cout),
                             nn.ReLU())

    return nn.Sequential(block(3, w, 1), block(w, 2 * w, 2), block(2 * w, 4 * w, 2),
                         nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(4 * w, 10))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", choices=SIZES, default="small")
    parser.add_argument("--steps", type=int, default=60)
    args = parser.parse_args()
    cfg = SIZES[args.size]
    cuda = torch.cuda.is_available()
    device = torch.device("cuda" if cuda else "cpu")
    torch.manual_seed(0)
    torch.backends.cudnn.benchmark = True

    loader = DataLoader(DeviceDataset(cfg["n"], cfg["res"], device), batch_size=cfg["batch"],
                        shuffle=True, drop_last=True)
    model = make_model(cfg["width"]).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    amp_dtype = torch.bfloat16 if cuda else torch.float32

    step = 0
    while step < args.steps:
        for x, y in loader:
            with torch.autocast(device.type, dtype=amp_dtype, enabled=cuda):
                loss = F.cross_entropy(model(x), y)
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
            step += 1
            if step % 20 == 0:
                print(f"step {step} loss {loss.item():.4f}", flush=True)
            if step >= args.steps:
                break


if __name__ == "__main__":
    main()
