"""ImageNet-style classification with DDP.

Launch: torchrun --nproc_per_node=4 train_ddp.py --data /datasets/imagenet
"""
import argparse
import logging
import os
import time

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader
from torch.utils.data.distributed import DistributedSampler
from torchvision import datasets, models, transforms

log = logging.getLogger("ddp")


def build_model(args):
    model = models.__dict__[args.arch](weights=None, num_classes=args.num_classes)
    if args.channels_last:
        model = model.to(memory_format=torch.channels_last)
    return model


def build_loaders(args):
    normalize = transforms.Normalize(mean=[0.485, 0.456, 0.406], std=[0.229, 0.224, 0.225])
    train_set = datasets.ImageFolder(os.path.join(args.data, "train"), transforms.Compose([
        transforms.RandomResizedCrop(224), transforms.RandomHorizontalFlip(),
        transforms.ToTensor(), normalize]))
    val_set = datasets.ImageFolder(os.path.join(args.data, "val"), transforms.Compose([
        transforms.Resize(256), transforms.CenterCrop(224), transforms.ToTensor(), normalize]))
    sampler = DistributedSampler(train_set)
    train_loader = DataLoader(train_set, batch_size=args.batch_size, sampler=sampler, shuffle=True,
                              num_workers=args.workers, pin_memory=True, drop_last=True)
    val_sampler = DistributedSampler(val_set, shuffle=False)
    val_loader = DataLoader(val_set, batch_size=args.batch_size, sampler=val_sampler,
                            num_workers=args.workers, pin_memory=True)
    return train_loader, val_loader


def run_epoch(model, loader, criterion, optimizer, epoch, device, args):
    loader.sampler.set_epoch(epoch)
    model.train()
    t0 = time.time()
    for i, (images, target) in enumerate(loader):
        images = images.to(device, non_blocking=True)
        target = target.to(device, non_blocking=True)
        loss = criterion(model(images), target)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        if i % args.print_freq == 0 and dist.get_rank() == 0:
            log.info("epoch %d [%d/%d] loss %.4f (%.3fs/it)", epoch, i, len(loader),
                     loss.item(), (time.time() - t0) / (i + 1))


@torch.no_grad()
def validate(model, loader, device):
    model.eval()
    correct = torch.zeros(1, device=device)
    total = torch.zeros(1, device=device)
    for images, target in loader:
        images = images.to(device, non_blocking=True)
        target = target.to(device, non_blocking=True)
        correct += (model(images).argmax(1) == target).sum()
        total += target.numel()
    dist.all_reduce(correct)
    dist.all_reduce(total)
    return (correct / total).item()


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--data", required=True)
    p.add_argument("--arch", default="resnet50")
    p.add_argument("--num-classes", type=int, default=1000)
    p.add_argument("--epochs", type=int, default=90)
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--lr", type=float, default=0.1)
    p.add_argument("--workers", type=int, default=8)
    p.add_argument("--print-freq", type=int, default=100)
    p.add_argument("--channels-last", action="store_true")
    args = p.parse_args()
    logging.basicConfig(level=logging.INFO)

    dist.init_process_group(backend="nccl")
    local_rank = int(os.environ["LOCAL_RANK"])
    device = torch.device("cuda")

    model = build_model(args).cuda()
    model = DDP(model)
    criterion = nn.CrossEntropyLoss().to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9, weight_decay=1e-4)
    scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=args.epochs)
    train_loader, val_loader = build_loaders(args)

    for epoch in range(args.epochs):
        run_epoch(model, train_loader, criterion, optimizer, epoch, device, args)
        scheduler.step()
        acc = validate(model, val_loader, device)
        if dist.get_rank() == 0:
            log.info("epoch %d top1 %.3f (local_rank %d)", epoch, acc, local_rank)
            torch.save({"epoch": epoch, "state_dict": model.state_dict(),
                        "optimizer": optimizer.state_dict()}, "checkpoint.pth")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
