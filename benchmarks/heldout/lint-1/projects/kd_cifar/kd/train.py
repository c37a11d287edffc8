import argparse
import json
import logging
from collections import defaultdict

import torch
import torch.nn as nn
from torch.utils.data import DataLoader
from torchvision import datasets, transforms

from kd.losses import KDLoss
from kd.models import load_teacher, resnet_cifar

logging.basicConfig(level=logging.INFO)
log = logging.getLogger("kd")


class Distiller:
    def __init__(self, student, teacher, optimizer, alpha, temperature, device):
        self.student, self.teacher = student, teacher
        self.optimizer = optimizer
        self.alpha = alpha
        self.kd = KDLoss(temperature)
        self.ce = nn.CrossEntropyLoss()
        self.device = device
        self.meters = defaultdict(float)
        self.history = []

    @torch.no_grad()
    def teacher_logits(self, x):
        return self.teacher(x)

    def step(self, x, y, global_step):
        s = self.student(x)
        t = self.teacher_logits(x)
        kd = self.kd(s, t)
        ce = self.ce(s, y)
        loss = self.alpha * kd + (1 - self.alpha) * ce
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        self.optimizer.step()
        self.meters["kd"] += kd.detach()
        self.meters["ce"] += ce.detach()
        self.history.append({"step": global_step, "loss": float(loss)})

    def train_epoch(self, loader):
        self.student.train()
        self.meters.clear()
        for i, (x, y) in enumerate(loader):
            x, y = x.to(self.device, non_blocking=True), y.to(self.device, non_blocking=True)
            self.step(x, y, len(self.history))
        n = i + 1
        return {k: (v / n).item() for k, v in self.meters.items()}

    @torch.no_grad()
    def evaluate(self, loader):
        self.student.eval()
        correct = torch.zeros((), device=self.device)
        for x, y in loader:
            x, y = x.to(self.device, non_blocking=True), y.to(self.device, non_blocking=True)
            correct += (self.student(x).argmax(1) == y).sum()
        return correct.item() / len(loader.dataset)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--teacher", default="ckpt/resnet50_cifar100.pt")
    p.add_argument("--epochs", type=int, default=240)
    p.add_argument("--alpha", type=float, default=0.9)
    p.add_argument("--temperature", type=float, default=4.0)
    args = p.parse_args()

    device = torch.device("cuda")
    norm = transforms.Normalize((0.5071, 0.4865, 0.4409), (0.2673, 0.2564, 0.2762))
    train = datasets.CIFAR100("data", train=True, download=True, transform=transforms.Compose([
        transforms.RandomCrop(32, padding=4), transforms.RandomHorizontalFlip(), transforms.ToTensor(), norm]))
    test = datasets.CIFAR100("data", train=False, download=True,
                             transform=transforms.Compose([transforms.ToTensor(), norm]))
    train_loader = DataLoader(train, batch_size=128, shuffle=True, num_workers=8, pin_memory=True, drop_last=True)
    test_loader = DataLoader(test, batch_size=512, num_workers=4, pin_memory=True)

    teacher = load_teacher(args.teacher, device)
    student = resnet_cifar("resnet18").to(device)
    optimizer = torch.optim.SGD(student.parameters(), lr=0.05, momentum=0.9, weight_decay=5e-4)
    sched = torch.optim.lr_scheduler.MultiStepLR(optimizer, [150, 180, 210], 0.1)
    distiller = Distiller(student, teacher, optimizer, args.alpha, args.temperature, device)

    for epoch in range(args.epochs):
        losses = distiller.train_epoch(train_loader)
        sched.step()
        acc = distiller.evaluate(test_loader)
        log.info("epoch %d %s test acc %.4f", epoch, losses, acc)
    torch.save(student.state_dict(), "student_r18.pt")
    with open("kd_history.json", "w") as f:
        json.dump(distiller.history, f)


if __name__ == "__main__":
    main()
