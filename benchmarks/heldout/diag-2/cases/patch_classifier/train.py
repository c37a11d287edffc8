import argparse
import math
import time

import torch
import torch.nn.functional as F

from config import Config
from data import HostBatchPool, synth_uint8_batch, to_tensor_normalize
from model import PatchConvNet


def lr_at(step, cfg, total):
    if step < cfg.warmup_steps:
        return cfg.lr * (step + 1) / cfg.warmup_steps
    p = (step - cfg.warmup_steps) / max(1, total - cfg.warmup_steps)
    return cfg.lr * 0.5 * (1 + math.cos(math.pi * p))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=300)
    args = ap.parse_args()
    cfg = Config.from_env()
    torch.manual_seed(cfg.seed)
    device = "cuda" if torch.cuda.is_available() else "cpu"

    # decode + ToTensor/Normalize happen "in the loader", batches arrive ready for the model
    g = torch.Generator().manual_seed(cfg.seed)
    raw = [synth_uint8_batch(cfg, g) for _ in range(cfg.pool_batches)]
    prepared = [(to_tensor_normalize(x, cfg.mean, cfg.std), y) for x, y in raw]
    del raw
    loader = HostBatchPool(prepared)

    model = PatchConvNet(cfg.channels, cfg.width, cfg.num_classes).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
    amp_dtype = torch.bfloat16

    model.train()
    t0 = time.time()
    for step in range(args.steps):
        for group in opt.param_groups:
            group["lr"] = lr_at(step, cfg, args.steps)
        images, labels = next(loader)
        images = images.to(device, non_blocking=True)
        labels = labels.to(device, non_blocking=True)
        with torch.autocast(device_type=device, dtype=amp_dtype):
            logits = model(images)
            loss = F.cross_entropy(logits, labels)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        if step % cfg.log_every == 0 or step == args.steps - 1:
            print(f"step {step:5d} loss {loss.item():.4f} lr {lr_at(step, cfg, args.steps):.2e} "
                  f"elapsed {time.time() - t0:.1f}s", flush=True)


if __name__ == "__main__":
    main()
