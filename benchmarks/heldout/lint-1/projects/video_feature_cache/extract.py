import argparse
import logging
import os

import numpy as np
import torch
from torch.utils.data import DataLoader

from dataset import ClipDataset

logging.basicConfig(level=logging.INFO)
log = logging.getLogger("extract")


def load_backbone(device):
    model = torch.hub.load("facebookresearch/pytorchvideo", "slow_r50", pretrained=True)
    model.blocks[-1].proj = torch.nn.Identity()
    return model.to(device)


@torch.no_grad()
def run(model, loader, out_dir):
    model.eval()
    for clips, idx in loader:
        feats = model(clips).float().cpu().numpy()
        for f, i in zip(feats, idx.tolist()):
            np.save(os.path.join(out_dir, f"{i:07d}.npy"), f)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--videos", default="/data/kinetics400/videos")
    p.add_argument("--list", default="/data/kinetics400/train.txt")
    p.add_argument("--out", default="/data/kinetics400/feats_slow_r50")
    p.add_argument("--bs", type=int, default=16)
    p.add_argument("--workers", type=int, default=8)
    args = p.parse_args()
    os.makedirs(args.out, exist_ok=True)

    device = torch.device("cuda")
    ds = ClipDataset(args.videos, args.list)
    loader = DataLoader(ds, batch_size=args.bs, num_workers=args.workers)
    model = load_backbone(device)
    run(model, loader, args.out)
    log.info("wrote %d feature files to %s", len(ds), args.out)


if __name__ == "__main__":
    main()
