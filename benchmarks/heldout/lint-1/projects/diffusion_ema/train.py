import argparse
import logging
import os

import torch
from torch.utils.data import DataLoader
from torchvision import datasets, transforms
from torchvision.utils import save_image

from ema import EMA
from model import GaussianDiffusion, TinyUNet

logging.basicConfig(level=logging.INFO)
log = logging.getLogger("ddpm")


def validate(net, diffusion, loader, device, max_batches=20):
    net.eval()
    total, n = 0.0, 0
    for i, (x, _) in enumerate(loader):
        if i >= max_batches:
            break
        x = x.to(device, non_blocking=True)
        total += diffusion.loss(net, x).item()
        n += 1
    return total / max(n, 1)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--data", default="data/cifar10")
    p.add_argument("--steps", type=int, default=800_000)
    p.add_argument("--bs", type=int, default=128)
    p.add_argument("--lr", type=float, default=2e-4)
    p.add_argument("--out", default="runs/ddpm")
    p.add_argument("--val-every", type=int, default=5000)
    args = p.parse_args()
    os.makedirs(args.out, exist_ok=True)

    device = torch.device("cuda")
    tf = transforms.Compose([transforms.RandomHorizontalFlip(), transforms.ToTensor(),
                             transforms.Normalize((0.5,) * 3, (0.5,) * 3)])
    train_ds = datasets.CIFAR10(args.data, train=True, download=True, transform=tf)
    val_ds = datasets.CIFAR10(args.data, train=False, download=True, transform=tf)
    loader = DataLoader(train_ds, batch_size=args.bs, shuffle=True, num_workers=8,
                        pin_memory=True, drop_last=True, persistent_workers=True)
    val_loader = DataLoader(val_ds, batch_size=256, num_workers=4, pin_memory=True)

    model = TinyUNet().to(device)
    ema = EMA(model)
    diffusion = GaussianDiffusion(device=device)
    opt = torch.optim.Adam(model.parameters(), lr=args.lr)

    step = 0
    while step < args.steps:
        for x, _ in loader:
            x = x.to(device, non_blocking=True)
            with torch.autocast("cuda", dtype=torch.bfloat16):
                loss = diffusion.loss(model, x)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            ema.update(model)
            step += 1

            if step % args.val_every == 0:
                val = validate(ema.shadow, diffusion, val_loader, device)
                log.info("step %d train %.4f ema-val %.4f", step, loss.item(), val)
                with torch.inference_mode():
                    imgs = diffusion.p_sample_loop(ema.shadow, (16, 3, 32, 32), device)
                save_image(imgs * 0.5 + 0.5, os.path.join(args.out, f"sample_{step}.png"), nrow=4)
                torch.save({"model": model.state_dict(), "ema": ema.state_dict(), "step": step},
                           os.path.join(args.out, "last.pt"))
            if step >= args.steps:
                break


if __name__ == "__main__":
    main()
