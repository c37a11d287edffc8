import os
import random

import numpy as np
import torch
from PIL import Image
from torch.utils.data import DataLoader, Dataset
from torch.utils.data.distributed import DistributedSampler

MEAN = np.array([0.485, 0.456, 0.406], dtype=np.float32)
STD = np.array([0.229, 0.224, 0.225], dtype=np.float32)


class CityscapesCrops(Dataset):
    def __init__(self, root, split, crop):
        self.img_dir = os.path.join(root, "leftImg8bit", split)
        self.lbl_dir = os.path.join(root, "gtFine", split)
        self.items = sorted(
            os.path.join(city, f)
            for city in os.listdir(self.img_dir)
            for f in os.listdir(os.path.join(self.img_dir, city))
        )
        self.crop = crop
        self.train = split == "train"

    def __len__(self):
        return len(self.items)

    def __getitem__(self, idx):
        rel = self.items[idx]
        img = Image.open(os.path.join(self.img_dir, rel)).convert("RGB")
        lbl = Image.open(os.path.join(self.lbl_dir, rel.replace("leftImg8bit", "gtFine_labelTrainIds")))
        img, lbl = np.asarray(img, dtype=np.float32) / 255.0, np.asarray(lbl, dtype=np.int64)
        if self.train:
            h, w = lbl.shape
            y, x = random.randint(0, h - self.crop), random.randint(0, w - self.crop)
            img = img[y:y + self.crop, x:x + self.crop]
            lbl = lbl[y:y + self.crop, x:x + self.crop]
            if random.random() < 0.5:
                img, lbl = img[:, ::-1], lbl[:, ::-1]
        img = (img - MEAN) / STD
        return torch.from_numpy(img.transpose(2, 0, 1).copy()), torch.from_numpy(lbl.copy())


def build_train_loader(cfg, rank, world_size):
    ds = CityscapesCrops(cfg.data.root, "train", cfg.data.crop)
    sampler = DistributedSampler(ds, num_replicas=world_size, rank=rank, shuffle=True)
    loader = DataLoader(
        ds,
        batch_size=cfg.data.batch_size,
        sampler=sampler,
        num_workers=cfg.data.workers,
        pin_memory=True,
        drop_last=True,
        persistent_workers=True,
    )
    return loader


def build_val_loader(cfg):
    ds = CityscapesCrops(cfg.data.root, "val", cfg.data.crop)
    return DataLoader(ds, batch_size=1, shuffle=False, num_workers=4, pin_memory=True)
