import argparse
import glob
import logging
import os
import random

import torch
import torch.nn as nn
import torch.nn.functional as F
from PIL import Image
from torch.utils.data import DataLoader, Dataset
from torchvision.transforms import functional as TF

from losses import VGGPerceptualLoss, psnr

logging.basicConfig(level=logging.INFO)
log = logging.getLogger("srgan")


class PairedPatches(Dataset):
    def __init__(self, root, patch=96, scale=4, train=True):
        self.files = sorted(glob.glob(os.path.join(root, "*.png")))
        self.patch, self.scale, self.train = patch, scale, train

    def __len__(self):
        return len(self.files)

    def __getitem__(self, i):
        hr = Image.open(self.files[i]).convert("RGB")
        if self.train:
            x = random.randint(0, hr.width - self.patch)
            y = random.randint(0, hr.height - self.patch)
            hr = hr.crop((x, y, x + self.patch, y + self.patch))
        else:
            hr = TF.center_crop(hr, [self.patch * 4, self.patch * 4])
        lr = hr.resize((hr.width // self.scale, hr.height // self.scale), Image.BICUBIC)
        return TF.to_tensor(lr), TF.to_tensor(hr)


class ResBlock(nn.Module):
    def __init__(self, c=64):
        super().__init__()
        self.body = nn.Sequential(nn.Conv2d(c, c, 3, 1, 1), nn.BatchNorm2d(c), nn.PReLU(),
                                  nn.Conv2d(c, c, 3, 1, 1), nn.BatchNorm2d(c))

    def forward(self, x):
        return x + self.body(x)


class Generator(nn.Module):
    def __init__(self, n_blocks=16, c=64):
        super().__init__()
        self.head = nn.Sequential(nn.Conv2d(3, c, 9, 1, 4), nn.PReLU())
        self.body = nn.Sequential(*[ResBlock(c) for _ in range(n_blocks)])
        self.up = nn.Sequential(nn.Conv2d(c, c * 4, 3, 1, 1), nn.PixelShuffle(2), nn.PReLU(),
                                nn.Conv2d(c, c * 4, 3, 1, 1), nn.PixelShuffle(2), nn.PReLU())
        self.tail = nn.Conv2d(c, 3, 9, 1, 4)

    def forward(self, x):
        h = self.head(x)
        return torch.sigmoid(self.tail(self.up(h + self.body(h))))


class Discriminator(nn.Module):
    def __init__(self):
        super().__init__()
        layers, c_in = [], 3
        for c, s in [(64, 1), (64, 2), (128, 1), (128, 2), (256, 1), (256, 2), (512, 1), (512, 2)]:
            layers += [nn.Conv2d(c_in, c, 3, s, 1), nn.LeakyReLU(0.2, True)]
            c_in = c
        self.features = nn.Sequential(*layers)
        self.head = nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(512, 1))

    def forward(self, x):
        return self.head(self.features(x))


def validate(generator, loader, device):
    generator.eval()
    scores = []
    for lr, hr in loader:
        sr = generator(lr.to(device))
        scores.append(psnr(sr, hr.to(device)))
    return torch.stack(scores).mean().item()


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--train", default="data/DIV2K_train_HR")
    p.add_argument("--val", default="data/DIV2K_valid_HR")
    p.add_argument("--epochs", type=int, default=200)
    p.add_argument("--bs", type=int, default=16)
    p.add_argument("--adv-weight", type=float, default=1e-3)
    p.add_argument("--out", default="ckpt")
    args = p.parse_args()
    os.makedirs(args.out, exist_ok=True)

    device = torch.device("cuda")
    train_loader = DataLoader(PairedPatches(args.train), batch_size=args.bs, shuffle=True,
                              num_workers=8, pin_memory=True, drop_last=True)
    val_loader = DataLoader(PairedPatches(args.val, train=False), batch_size=1, num_workers=2)

    G, D = Generator().to(device), Discriminator().to(device)
    perceptual = VGGPerceptualLoss().to(device)
    opt_g = torch.optim.Adam(G.parameters(), lr=1e-4, betas=(0.9, 0.999))
    opt_d = torch.optim.Adam(D.parameters(), lr=1e-4, betas=(0.9, 0.999))

    for epoch in range(args.epochs):
        G.train()
        D.train()
        for step, (lr, hr) in enumerate(train_loader):
            lr = lr.to(device, non_blocking=True)
            hr = hr.to(device, non_blocking=True)
            sr = G(lr)

            d_real = D(hr)
            d_fake = D(sr.detach())
            loss_d = (F.binary_cross_entropy_with_logits(d_real, torch.ones_like(d_real))
                      + F.binary_cross_entropy_with_logits(d_fake, torch.zeros_like(d_fake)))
            opt_d.zero_grad(set_to_none=True)
            loss_d.backward()
            opt_d.step()

            adv = F.binary_cross_entropy_with_logits(D(sr), torch.ones_like(d_real))
            loss_g = perceptual(sr, hr) + args.adv_weight * adv
            opt_g.zero_grad(set_to_none=True)
            loss_g.backward()
            opt_g.step()
            if step % 100 == 0:
                log.info("epoch %d step %d loss_d %.4f loss_g %.4f", epoch, step, loss_d.item(), loss_g.item())

        score = validate(G, val_loader, device)
        log.info("epoch %d val psnr %.2f dB", epoch, score)
        torch.save({"G": G, "D": D, "epoch": epoch}, os.path.join(args.out, f"srgan_e{epoch}.pth"))


if __name__ == "__main__":
    main()
