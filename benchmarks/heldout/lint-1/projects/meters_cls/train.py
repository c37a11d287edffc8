import argparse
import logging

import torch
import torch.nn as nn
from torch.utils.data import DataLoader
from torchvision import datasets, models, transforms

from utils import AverageMeter, TopKAccuracy, timed
from utils.timing import TIMINGS

logging.basicConfig(level=logging.INFO)
log = logging.getLogger("cls")


@timed
def train_step(model, images, target, criterion, optimizer):
    output = model(images)
    loss = criterion(output, target)
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()
    return output, loss


@timed
def validate(model, loader, criterion, device):
    model.eval()
    losses = AverageMeter("val_loss", ":.4f")
    acc = TopKAccuracy()
    with torch.no_grad():
        for images, target in loader:
            images = images.to(device, non_blocking=True)
            target = target.to(device, non_blocking=True)
            output = model(images)
            losses.update(criterion(output, target).detach(), images.size(0))
            acc.update(output, target)
    return float(losses.avg), acc.compute()


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--data", default="/data/tiny-imagenet-200")
    p.add_argument("--epochs", type=int, default=60)
    p.add_argument("--bs", type=int, default=256)
    p.add_argument("--lr", type=float, default=0.2)
    p.add_argument("--print-freq", type=int, default=50)
    args = p.parse_args()

    device = torch.device("cuda")
    norm = transforms.Normalize([0.480, 0.448, 0.398], [0.277, 0.269, 0.282])
    train_set = datasets.ImageFolder(f"{args.data}/train", transforms.Compose([
        transforms.RandomCrop(64, padding=4), transforms.RandomHorizontalFlip(), transforms.ToTensor(), norm]))
    val_set = datasets.ImageFolder(f"{args.data}/val", transforms.Compose([transforms.ToTensor(), norm]))
    train_loader = DataLoader(train_set, batch_size=args.bs, shuffle=True, num_workers=8,
                              pin_memory=True, drop_last=True, persistent_workers=True)
    val_loader = DataLoader(val_set, batch_size=512, num_workers=4, pin_memory=True)

    model = models.resnet18(num_classes=200).to(device)
    criterion = nn.CrossEntropyLoss(label_smoothing=0.1)
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9, nesterov=True, weight_decay=5e-4)
    scheduler = torch.optim.lr_scheduler.OneCycleLR(optimizer, args.lr, total_steps=args.epochs * len(train_loader))

    for epoch in range(args.epochs):
        model.train()
        losses = AverageMeter("loss", ":.4f")
        top = TopKAccuracy()
        for i, (images, target) in enumerate(train_loader):
            images = images.to(device, non_blocking=True)
            target = target.to(device, non_blocking=True)
            output, loss = train_step(model, images, target, criterion, optimizer)
            scheduler.step()
            losses.update(loss, images.size(0))
            top.update(output, target)
            if i % args.print_freq == 0:
                log.info("epoch %d [%d/%d] %s", epoch, i, len(train_loader), losses)
        val_loss, val_acc = validate(model, val_loader, criterion, device)
        step_times = TIMINGS.get("train_step", [])
        log.info("epoch %d train %s val_loss %.4f %s (%.1f ms/step)", epoch, top.compute(), val_loss,
                 val_acc, 1000 * sum(step_times) / max(len(step_times), 1))
        TIMINGS.clear()
        torch.save(model.state_dict(), f"resnet18_tin_e{epoch}.pt")


if __name__ == "__main__":
    main()
