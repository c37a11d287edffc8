"""torchrun --standalone --nproc_per_node=4 train.py --data data/tiles.npz"""
import argparse
import logging

import numpy as np
import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, Dataset

from utils import init_distributed, is_main, load_checkpoint, save_checkpoint

logging.basicConfig(level=logging.INFO)
log = logging.getLogger("regress")


class TileDataset(Dataset):
    def __init__(self, path, augment=True):
        blob = np.load(path)
        self.x = blob["x"].astype(np.float32)
        self.y = blob["y"].astype(np.float32)
        self.augment = augment

    def __len__(self):
        return len(self.x)

    def __getitem__(self, i):
        x = self.x[i]
        if self.augment:
            k = np.random.randint(4)
            x = np.rot90(x, k, axes=(1, 2))
            if np.random.rand() < 0.5:
                x = x[:, :, ::-1]
            x = x + np.random.normal(0, 0.01, size=x.shape).astype(np.float32)
        return torch.from_numpy(np.ascontiguousarray(x)), torch.tensor(self.y[i])


def build_model(in_ch):
    return nn.Sequential(
        nn.Conv2d(in_ch, 64, 3, padding=1), nn.BatchNorm2d(64), nn.ReLU(),
        nn.Conv2d(64, 128, 3, stride=2, padding=1), nn.BatchNorm2d(128), nn.ReLU(),
        nn.Conv2d(128, 256, 3, stride=2, padding=1), nn.BatchNorm2d(256), nn.ReLU(),
        nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(256, 1),
    )


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--data", required=True)
    p.add_argument("--epochs", type=int, default=50)
    p.add_argument("--bs", type=int, default=64)
    p.add_argument("--ckpt", default="regress_last.pt")
    args = p.parse_args()

    rank, world, device = init_distributed()
    ds = TileDataset(args.data)
    loader = DataLoader(ds, batch_size=args.bs, shuffle=True, num_workers=6, pin_memory=True,
                        drop_last=True, persistent_workers=True)

    model = DDP(build_model(ds.x.shape[1]).to(device), device_ids=[device.index])
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    start = load_checkpoint(args.ckpt, model, optimizer)
    criterion = nn.SmoothL1Loss()

    for epoch in range(start, args.epochs):
        model.train()
        total = torch.zeros(2, device=device)
        for x, y in loader:
            x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)
            loss = criterion(model(x).squeeze(1), y)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            total[0] += loss.detach() * x.size(0)
            total[1] += x.size(0)
        dist.all_reduce(total)
        if is_main():
            log.info("epoch %d train loss %.5f (world %d)", epoch, (total[0] / total[1]).item(), world)
        save_checkpoint(args.ckpt, model, optimizer, epoch)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
