"""Config-driven GPT pretraining entry point."""
import argparse
import copy
import math
import os
import time

import torch

import components  # noqa: F401  (registers builders)
from registry import DATASETS, MODELS, OPTIMIZERS

EXPERIMENT = {
    "model": {"type": "gpt", "vocab_size": 50304, "block_size": 1024, "n_layer": 6, "n_head": 12, "n_embd": 768},
    "optimizer": {"type": "adamw", "lr": 6e-4, "weight_decay": 0.1},
    "data": {"type": "random_tokens", "vocab_size": 50304, "block_size": 1024, "batch_size": 16,
             "n_tokens": 8_000_000},
    "schedule": {"warmup": 100, "min_lr_ratio": 0.1},
    "grad_clip": 1.0,
    "log_interval": 100,
}

SMOKE_OVERRIDES = {
    "model": {"vocab_size": 512, "block_size": 64, "n_layer": 2, "n_head": 2, "n_embd": 64},
    "data": {"vocab_size": 512, "block_size": 64, "batch_size": 2, "n_tokens": 10_000},
}


def resolve(exp):
    exp = copy.deepcopy(exp)
    if os.environ.get("SMOKE") == "1":
        for k, v in SMOKE_OVERRIDES.items():
            exp[k].update(v)
    return exp


def lr_lambda(schedule, total):
    def f(step):
        if step < schedule["warmup"]:
            return (step + 1) / schedule["warmup"]
        t = (step - schedule["warmup"]) / max(1, total - schedule["warmup"])
        return schedule["min_lr_ratio"] + (1 - schedule["min_lr_ratio"]) * 0.5 * (1 + math.cos(math.pi * t))
    return f


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=300)
    args = ap.parse_args()
    exp = resolve(EXPERIMENT)

    torch.manual_seed(1337)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    model = MODELS.build(exp["model"]).to(device)
    optimizer = OPTIMIZERS.build(exp["optimizer"], params=model.parameters())
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lr_lambda(exp["schedule"], args.steps))
    batches = iter(DATASETS.build(exp["data"], device=device))
    amp = torch.autocast(device, dtype=torch.bfloat16, enabled=device == "cuda")

    model.train()
    t0 = time.perf_counter()
    for step in range(args.steps):
        x, y = next(batches)
        with amp:
            loss = model(x, y)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), exp["grad_clip"])
        optimizer.step()
        scheduler.step()
        optimizer.zero_grad(set_to_none=True)
        if step % exp["log_interval"] == 0:
            print(f"step {step:5d} | loss {loss.item():.4f} | lr {scheduler.get_last_lr()[0]:.2e} | "
                  f"{time.perf_counter() - t0:.1f}s", flush=True)
    print("done")


if __name__ == "__main__":
    main()
