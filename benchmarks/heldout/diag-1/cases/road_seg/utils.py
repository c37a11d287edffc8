"""Bits shared by the segmentation scripts (loosely follows torchvision's references)."""
import time
from collections import defaultdict, deque

import torch


class SmoothedValue:
    def __init__(self, window=20):
        self.values = deque(maxlen=window)

    def update(self, v):
        self.values.append(v)

    @property
    def avg(self):
        return sum(self.values) / max(1, len(self.values))


class MetricLogger:
    def __init__(self, print_freq=50):
        self.meters = defaultdict(SmoothedValue)
        self.print_freq = print_freq
        self.t0 = time.perf_counter()

    def update(self, **kw):
        for k, v in kw.items():
            self.meters[k].update(v)

    def maybe_print(self, it, header=""):
        if it % self.print_freq == 0:
            body = "  ".join(f"{k} {m.avg:.4f}" for k, m in self.meters.items())
            print(f"{header} [{it}] {body}  ({time.perf_counter() - self.t0:.1f}s)", flush=True)


class ConfusionMatrix:
    def __init__(self, num_classes):
        self.num_classes = num_classes
        self.mat = None

    def update(self, target, pred):
        n = self.num_classes
        if self.mat is None:
            self.mat = torch.zeros((n, n), dtype=torch.int64, device=target.device)
        k = (target >= 0) & (target < n)
        inds = n * target[k].to(torch.int64) + pred[k]
        self.mat += torch.bincount(inds, minlength=n ** 2).reshape(n, n)

    def compute(self):
        h = self.mat.float()
        acc_global = torch.diag(h).sum() / h.sum()
        iu = torch.diag(h) / (h.sum(1) + h.sum(0) - torch.diag(h))
        return acc_global.item(), iu.nanmean().item()

    def reset(self):
        self.mat = None


class SyntheticStreets:
    """Random images + label maps of street-scene size, generated on the device."""

    def __init__(self, n_batches, batch_size, size, num_classes, device, seed=0):
        g = torch.Generator(device=device).manual_seed(seed)
        self.images = [torch.randn(batch_size, 3, size, size, device=device, generator=g)
                       for _ in range(n_batches)]
        self.targets = [torch.randint(0, num_classes, (batch_size, size, size), device=device, generator=g)
                        for _ in range(n_batches)]

    def __len__(self):
        return len(self.images)

    def __iter__(self):
        return iter(zip(self.images, self.targets))
