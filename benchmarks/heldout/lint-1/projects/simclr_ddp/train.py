"""SimCLR pretraining on CIFAR-10.  torchrun --nproc_per_node=2 train.py"""
import argparse
import logging
import os

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
import torchvision
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader
from torch.utils.data.distributed import DistributedSampler
from torchvision import transforms as T

from knn import knn_accuracy

log = logging.getLogger("simclr")


class TwoViews:
    def __init__(self, tf):
        self.tf = tf

    def __call__(self, x):
        return self.tf(x), self.tf(x)


class SimCLR(nn.Module):
    def __init__(self, proj_dim=128):
        super().__init__()
        self.backbone = torchvision.models.resnet18(num_classes=10)
        self.backbone.conv1 = nn.Conv2d(3, 64, 3, 1, 1, bias=False)
        self.backbone.maxpool = nn.Identity()
        self.backbone.fc = nn.Identity()
        self.proj = nn.Sequential(nn.Linear(512, 512), nn.ReLU(), nn.Linear(512, proj_dim))

    def forward(self, x):
        return self.proj(self.backbone(x))


def nt_xent(z1, z2, tau=0.2):
    z = F.normalize(torch.cat([z1, z2]), dim=1)
    sim = z @ z.t() / tau
    sim.fill_diagonal_(float("-inf"))
    n = z1.size(0)
    targets = torch.cat([torch.arange(n, 2 * n), torch.arange(0, n)]).to(z.device)
    return F.cross_entropy(sim, targets)


def unwrap(model):
    return model.module if hasattr(model, "module") else model


def make_loaders(args, distributed):
    aug = T.Compose([T.RandomResizedCrop(32), T.RandomHorizontalFlip(),
                     T.RandomApply([T.ColorJitter(0.4, 0.4, 0.4, 0.1)], p=0.8), T.RandomGrayscale(0.2),
                     T.ToTensor(), T.Normalize((0.4914, 0.4822, 0.4465), (0.247, 0.243, 0.261))])
    plain = T.Compose([T.ToTensor(), T.Normalize((0.4914, 0.4822, 0.4465), (0.247, 0.243, 0.261))])
    train_set = torchvision.datasets.CIFAR10(args.data, train=True, transform=TwoViews(aug))
    sampler = DistributedSampler(train_set, drop_last=True) if distributed else None
    train_loader = DataLoader(train_set, batch_size=args.bs, sampler=sampler, shuffle=(sampler is None),
                              num_workers=8, pin_memory=True, drop_last=True, persistent_workers=True)
    memory = DataLoader(torchvision.datasets.CIFAR10(args.data, train=True, transform=plain),
                        batch_size=512, num_workers=4, pin_memory=True)
    test = DataLoader(torchvision.datasets.CIFAR10(args.data, train=False, transform=plain),
                      batch_size=512, num_workers=4, pin_memory=True)
    return train_loader, sampler, memory, test


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--data", default="data")
    p.add_argument("--epochs", type=int, default=800)
    p.add_argument("--bs", type=int, default=256)
    p.add_argument("--lr", type=float, default=0.5)
    p.add_argument("--ckpt", default="simclr_last.pt")
    args = p.parse_args()
    logging.basicConfig(level=logging.INFO)

    distributed = "LOCAL_RANK" in os.environ
    local_rank = int(os.environ.get("LOCAL_RANK", 0))
    if distributed:
        torch.cuda.set_device(local_rank)
        dist.init_process_group("nccl")
    device = torch.device("cuda", local_rank)
    rank0 = not distributed or dist.get_rank() == 0

    model = SimCLR().to(device)
    model = nn.SyncBatchNorm.convert_sync_batchnorm(model) if distributed else model
    model = DDP(model, device_ids=[local_rank]) if distributed else model
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9, weight_decay=5e-4)
    scaler = torch.amp.GradScaler("cuda")
    train_loader, sampler, memory_loader, test_loader = make_loaders(args, distributed)

    start_epoch = 0
    if os.path.exists(args.ckpt):
        state = torch.load(args.ckpt, map_location=device, weights_only=True)
        unwrap(model).load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        start_epoch = state["epoch"] + 1

    if sampler is not None:
        sampler.set_epoch(start_epoch)
    for epoch in range(start_epoch, args.epochs):
        model.train()
        for (v1, v2), _ in train_loader:
            v1 = v1.to(device, non_blocking=True)
            v2 = v2.to(device, non_blocking=True)
            with torch.autocast("cuda", dtype=torch.float16):
                loss = nt_xent(model(v1), model(v2))
            if not torch.isfinite(loss):
                raise RuntimeError(f"non-finite loss at epoch {epoch}")
            optimizer.zero_grad(set_to_none=True)
            scaler.scale(loss).backward()
            scaler.unscale_(optimizer)
            nn.utils.clip_grad_norm_(model.parameters(), 3.0)
            scaler.step(optimizer)
            scaler.update()

        if rank0 and epoch % 10 == 0:
            acc = knn_accuracy(unwrap(model).backbone, memory_loader, test_loader, device)
            log.info("epoch %d loss %.4f knn %.4f", epoch, loss.item(), acc)
            torch.save({"model": unwrap(model).state_dict(), "optimizer": optimizer.state_dict(),
                        "epoch": epoch}, args.ckpt)
    if distributed:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
