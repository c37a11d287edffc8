import glob
import os

import albumentations as A
import cv2
import lightning as L
import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset


class PolypDataset(Dataset):
    def __init__(self, files, mask_dir, aug):
        self.files, self.mask_dir, self.aug = files, mask_dir, aug

    def __len__(self):
        return len(self.files)

    def __getitem__(self, i):
        img = cv2.cvtColor(cv2.imread(self.files[i]), cv2.COLOR_BGR2RGB)
        mask = cv2.imread(os.path.join(self.mask_dir, os.path.basename(self.files[i])), cv2.IMREAD_GRAYSCALE)
        out = self.aug(image=img, mask=mask)
        img = out["image"].astype(np.float32) / 255.0
        return torch.from_numpy(img.transpose(2, 0, 1)), torch.from_numpy((out["mask"] > 127).astype(np.float32))


class PolypDataModule(L.LightningDataModule):
    def __init__(self, root="data/kvasir", batch_size=16, size=352, val_workers=4):
        super().__init__()
        self.root, self.batch_size, self.size, self.val_workers = root, batch_size, size, val_workers

    def setup(self, stage=None):
        files = sorted(glob.glob(os.path.join(self.root, "images", "*.jpg")))
        split = int(0.9 * len(files))
        train_aug = A.Compose([
            A.RandomResizedCrop(size=(self.size, self.size), scale=(0.5, 1.0)),
            A.HorizontalFlip(), A.VerticalFlip(), A.RandomRotate90(),
            A.ElasticTransform(p=0.3), A.ColorJitter(0.2, 0.2, 0.2, 0.05),
            A.Normalize(mean=0, std=1, max_pixel_value=1.0),
        ])
        val_aug = A.Compose([A.Resize(self.size, self.size)])
        masks = os.path.join(self.root, "masks")
        self.train_ds = PolypDataset(files[:split], masks, train_aug)
        self.val_ds = PolypDataset(files[split:], masks, val_aug)

    def train_dataloader(self):
        return DataLoader(self.train_ds, batch_size=self.batch_size, shuffle=True, drop_last=True)

    def val_dataloader(self):
        return DataLoader(self.val_ds, batch_size=self.batch_size, num_workers=self.val_workers,
                          persistent_workers=True)
