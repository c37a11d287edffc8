import argparse
import time

import torch
import torch.nn.functional as F

from config import TrainConfig
from data import ClickLogPool
from model import DeepCTR
from optim import build_optimizer, build_scheduler


def run(cfg: TrainConfig):
    torch.manual_seed(cfg.seed)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    model = DeepCTR(cfg.data, cfg.model).to(device)
    optimizer = build_optimizer(model, cfg.optim)
    scheduler = build_scheduler(optimizer, cfg.optim)
    n_params = sum(p.numel() for p in model.parameters())
    print(f"DeepCTR: {n_params / 1e6:.1f}M parameters in {len(list(model.parameters()))} tensors")

    data = iter(ClickLogPool(cfg.data, device, seed=cfg.seed))
    model.train()
    t0 = time.perf_counter()
    for step in range(cfg.steps):
        dense, sparse, label = next(data)
        with torch.autocast(device, dtype=torch.bfloat16, enabled=device == "cuda"):
            logit = model(dense, sparse)
        loss = F.binary_cross_entropy_with_logits(logit.float(), label)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        scheduler.step()
        if step % cfg.log_every == 0:
            print(f"step {step:5d} logloss {loss.item():.4f} ({time.perf_counter() - t0:.1f}s)", flush=True)


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=300)
    cli = parser.parse_args()
    cfg = TrainConfig.default()
    cfg.steps = cli.steps
    run(cfg)
