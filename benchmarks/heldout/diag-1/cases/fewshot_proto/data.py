"""Synthetic stand-in for a miniImageNet-style few-shot split."""
import torch
from torch.utils.data import Dataset


class SyntheticFewShot(Dataset):
    def __init__(self, num_classes, per_class, size=84, seed=0):
        g = torch.Generator().manual_seed(seed)
        n = num_classes * per_class
        # the split file lists images in a shuffled order
        self.labels = torch.arange(num_classes).repeat_interleave(per_class)[torch.randperm(n, generator=g)].tolist()
        self.size = size
        self.seed = seed

    def __len__(self):
        return len(self.labels)

    def __getitem__(self, i):
        g = torch.Generator().manual_seed(self.seed * 1_000_003 + i)
        img = torch.randint(0, 256, (3, self.size, self.size), dtype=torch.uint8, generator=g)
        return img, self.labels[i]
