"""ResNet-50 on synthetic 128px images, Keras-style fit() with callbacks."""
import argparse
import os

import torch
import torch.nn.functional as F

from callbacks import CallbackList, ProgbarLogger, ReleaseCachedMemory, WarmupCosine
from net import ResNet50

MEAN = (0.485, 0.456, 0.406)
STD = (0.229, 0.224, 0.225)


class SyntheticImageNet:
    def __init__(self, batch_size, size, num_classes, device, n_batches=4):
        g = torch.Generator(device=device).manual_seed(0)
        self.x = [torch.randint(0, 256, (batch_size, 3, size, size), dtype=torch.uint8, device=device, generator=g)
                  for _ in range(n_batches)]
        self.y = [torch.randint(0, num_classes, (batch_size,), device=device, generator=g) for _ in range(n_batches)]
        self.mean = torch.tensor(MEAN, device=device).view(1, 3, 1, 1) * 255
        self.std = torch.tensor(STD, device=device).view(1, 3, 1, 1) * 255

    def __iter__(self):
        i = 0
        while True:
            x = (self.x[i].float() - self.mean) / self.std
            yield x.contiguous(memory_format=torch.channels_last), self.y[i]
            i = (i + 1) % len(self.x)


class Model:
    def __init__(self, net, device):
        self.net = net.to(device).to(memory_format=torch.channels_last)
        self.device = device
        self.optimizer = None

    def compile(self, optimizer, label_smoothing=0.1):
        self.optimizer = optimizer
        self.label_smoothing = label_smoothing

    def train_step(self, x, y):
        with torch.autocast(self.device, dtype=torch.bfloat16, enabled=self.device == "cuda"):
            loss = F.cross_entropy(self.net(x), y, label_smoothing=self.label_smoothing)
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        self.optimizer.step()
        return {"loss": loss.detach()}

    def fit(self, data, steps, callbacks=()):
        cbs = CallbackList(callbacks, self)
        self.net.train()
        cbs.on_train_begin()
        for batch, (x, y) in zip(range(steps), data):
            cbs.on_train_batch_begin(batch)
            logs = self.train_step(x, y)
            cbs.on_train_batch_end(batch, logs)
        cbs.on_train_end()


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=300)
    p.add_argument("--batch-size", type=int, default=128)
    p.add_argument("--image-size", type=int, default=128)
    p.add_argument("--lr", type=float, default=0.2)
    args = p.parse_args()
    if os.environ.get("SMOKE") == "1":
        args.batch_size, args.image_size = 2, 64

    torch.manual_seed(0)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    torch.backends.cudnn.benchmark = True
    model = Model(ResNet50(), device)
    model.compile(torch.optim.SGD(model.net.parameters(), lr=args.lr, momentum=0.9,
                                  weight_decay=5e-5, nesterov=True))
    data = SyntheticImageNet(args.batch_size, args.image_size, 1000, device)
    model.fit(data, args.steps, callbacks=[
        WarmupCosine(args.lr, 50, args.steps),
        ProgbarLogger(),
    ])
    print("done")


if __name__ == "__main__":
    main()
