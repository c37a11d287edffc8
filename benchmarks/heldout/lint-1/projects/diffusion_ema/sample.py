import argparse
import os

import torch
from torchvision.utils import save_image

from model import GaussianDiffusion, TinyUNet


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--ckpt", default="runs/ddpm/last.pt")
    p.add_argument("--n", type=int, default=256)
    p.add_argument("--bs", type=int, default=64)
    p.add_argument("--out", default="samples")
    args = p.parse_args()
    os.makedirs(args.out, exist_ok=True)

    device = torch.device("cuda")
    state = torch.load(args.ckpt, map_location="cpu")
    net = TinyUNet().to(device)
    net.load_state_dict(state["ema"]["shadow"])
    net.eval()
    diffusion = GaussianDiffusion(device=device)

    done = 0
    while done < args.n:
        b = min(args.bs, args.n - done)
        imgs = diffusion.p_sample_loop(net, (b, 3, 32, 32), device)
        for j, img in enumerate(imgs):
            save_image(img * 0.5 + 0.5, os.path.join(args.out, f"{done + j:05d}.png"))
        done += b


if __name__ == "__main__":
    main()
