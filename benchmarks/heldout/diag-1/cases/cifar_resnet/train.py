"""CIFAR-style ResNet-18 with on-device augmentation."""
import argparse
import os
import time

import torch
import torch.nn.functional as F

from accel import Accelerator
from resnet import ResNet18

CIFAR_MEAN = (125.3, 123.0, 113.9)
CIFAR_STD = (63.0, 62.1, 66.7)


class DeviceCifar:
    """The whole (synthetic) train split as uint8 on the device, with batched crop/flip."""

    def __init__(self, n, batch_size, device, pad=4, seed=0):
        g = torch.Generator(device=device).manual_seed(seed)
        self.images = torch.randint(0, 256, (n, 3, 32, 32), dtype=torch.uint8, device=device, generator=g)
        self.labels = torch.randint(0, 10, (n,), device=device, generator=g)
        self.batch_size, self.pad, self.g = batch_size, pad, g
        self.mean = torch.tensor(CIFAR_MEAN, device=device).view(1, 3, 1, 1)
        self.std = torch.tensor(CIFAR_STD, device=device).view(1, 3, 1, 1)
        self.base = torch.arange(32, device=device)

    def augment(self, x):
        B = x.shape[0]
        x = F.pad(x.float(), (self.pad,) * 4, mode="reflect")
        dy = torch.randint(0, 2 * self.pad + 1, (B, 1), device=x.device, generator=self.g)
        dx = torch.randint(0, 2 * self.pad + 1, (B, 1), device=x.device, generator=self.g)
        rows, cols = (self.base + dy)[:, :, None], (self.base + dx)[:, None, :]
        x = x[torch.arange(B, device=x.device)[:, None, None], :, rows, cols].permute(0, 3, 1, 2)
        flip = torch.rand(B, 1, 1, 1, device=x.device, generator=self.g) < 0.5
        x = torch.where(flip, x.flip(3), x)
        return ((x - self.mean) / self.std).contiguous(memory_format=torch.channels_last)

    def __iter__(self):
        n = self.images.shape[0]
        while True:
            perm = torch.randperm(n, device=self.images.device, generator=self.g)
            for i in range(0, n - self.batch_size + 1, self.batch_size):
                idx = perm[i:i + self.batch_size]
                yield self.augment(self.images[idx]), self.labels[idx]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--batch-size", type=int, default=1024)
    ap.add_argument("--lr", type=float, default=0.4)
    args = ap.parse_args()
    smoke = os.environ.get("SMOKE") == "1"
    if smoke:
        args.batch_size = 8

    torch.manual_seed(0)
    accelerator = Accelerator(mixed_precision="bf16")
    model, optimizer = accelerator.prepare(
        ResNet18(), lambda ps: torch.optim.SGD(ps, lr=args.lr, momentum=0.9, nesterov=True, weight_decay=5e-4))
    scheduler = torch.optim.lr_scheduler.OneCycleLR(optimizer, max_lr=args.lr, total_steps=max(args.steps, 2),
                                                    pct_start=0.25)
    data = iter(DeviceCifar(256 if smoke else 50_000, args.batch_size, accelerator.device))

    model.train()
    t0 = time.perf_counter()
    for step in range(args.steps):
        x, y = next(data)
        with accelerator.autocast():
            loss = F.cross_entropy(model(x), y, label_smoothing=0.1)
        optimizer.zero_grad(set_to_none=True)
        accelerator.backward(loss)
        optimizer.step()
        scheduler.step()
        if step % 100 == 0:
            accelerator.print(f"step {step:4d} loss {loss.item():.4f} ({time.perf_counter() - t0:.1f}s)")
    accelerator.print("done")


if __name__ == "__main__":
    main()
