import json
import os

import torch
from PIL import Image
from torch.utils.data import DataLoader, Dataset
from torchvision.transforms import v2 as T
from torchvision import tv_tensors


class CocoLikeDetection(Dataset):
    def __init__(self, root, ann_file, train=True):
        with open(ann_file) as f:
            ann = json.load(f)
        self.root = root
        self.images = {im["id"]: im for im in ann["images"]}
        self.boxes = {}
        for a in ann["annotations"]:
            self.boxes.setdefault(a["image_id"], []).append(a)
        self.ids = [i for i in self.images if i in self.boxes]
        aug = [T.RandomHorizontalFlip(0.5), T.RandomPhotometricDistort()] if train else []
        self.tf = T.Compose([T.ToImage(), *aug, T.ToDtype(torch.float32, scale=True)])

    def __len__(self):
        return len(self.ids)

    def __getitem__(self, idx):
        info = self.images[self.ids[idx]]
        img = Image.open(os.path.join(self.root, info["file_name"])).convert("RGB")
        anns = self.boxes[self.ids[idx]]
        boxes = torch.tensor([[a["bbox"][0], a["bbox"][1], a["bbox"][0] + a["bbox"][2],
                               a["bbox"][1] + a["bbox"][3]] for a in anns], dtype=torch.float32)
        target = {
            "boxes": tv_tensors.BoundingBoxes(boxes, format="XYXY", canvas_size=img.size[::-1]),
            "labels": torch.tensor([a["category_id"] for a in anns], dtype=torch.int64),
        }
        return self.tf(img, target)


def collate_fn(batch):
    return tuple(zip(*batch))


def build_loader(root, ann_file, batch_size, workers, train=True):
    ds = CocoLikeDetection(root, ann_file, train=train)
    return DataLoader(ds, batch_size=batch_size, shuffle=train, num_workers=workers,
                      collate_fn=collate_fn, drop_last=train)
