"""Tiny-CNN MNIST in seconds: the whole dataset lives on the GPU."""
import argparse
import time

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset
from torchvision import datasets


def load_to_gpu(root, train, device):
    ds = datasets.MNIST(root, train=train, download=True)
    x = ds.data.to(device).float().div_(255).sub_(0.1307).div_(0.3081).unsqueeze(1)
    y = ds.targets.to(device)
    return TensorDataset(x, y)


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.c1 = nn.Conv2d(1, 32, 3, padding=1)
        self.c2 = nn.Conv2d(32, 64, 3, padding=1)
        self.bn = nn.BatchNorm2d(64)
        self.fc = nn.Linear(64 * 7 * 7, 10)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.c1(x)), 2)
        x = F.max_pool2d(F.relu(self.bn(self.c2(x))), 2)
        return self.fc(x.flatten(1))


def sgd_step(model, optimizer, x, y):
    loss = F.cross_entropy(model(x), y)
    loss.backward()
    optimizer.step()
    return loss.detach()


@torch.no_grad()
def accuracy(model, loader):
    model.eval()
    correct = sum((model(x).argmax(1) == y).sum() for x, y in loader)
    model.train()
    return correct.item() / len(loader.dataset)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--root", default="data")
    p.add_argument("--epochs", type=int, default=8)
    p.add_argument("--bs", type=int, default=512)
    args = p.parse_args()

    device = torch.device("cuda")
    torch.backends.cudnn.benchmark = True
    train_ds = load_to_gpu(args.root, True, device)
    test_ds = load_to_gpu(args.root, False, device)
    train_loader = DataLoader(train_ds, batch_size=args.bs, shuffle=True, num_workers=0, drop_last=True)
    test_loader = DataLoader(test_ds, batch_size=2048, num_workers=0)

    model = Net().to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, nesterov=True)
    model.train()
    for epoch in range(args.epochs):
        t0 = time.time()
        losses = []
        for x, y in train_loader:
            losses.append(sgd_step(model, optimizer, x, y))
        torch.cuda.synchronize()
        print(f"epoch {epoch} loss {torch.stack(losses).mean().item():.4f} "
              f"acc {accuracy(model, test_loader):.4f} ({time.time() - t0:.1f}s)")


if __name__ == "__main__":
    main()
