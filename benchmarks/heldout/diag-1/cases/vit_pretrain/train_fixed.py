import argparse
import time

import torch
import torch.nn.functional as F

from config import Config
from data import DeviceSyntheticImages
from model import VisionTransformer


def cosine_with_warmup(cfg):
    import math

    def f(step):
        if step < cfg.warmup:
            return (step + 1) / cfg.warmup
        return 0.5 * (1 + math.cos(math.pi * (step - cfg.warmup) / max(1, cfg.steps - cfg.warmup)))
    return f


class Runner:
    def __init__(self, cfg: Config):
        self.cfg = cfg
        torch.manual_seed(cfg.seed)
        self.device = "cuda" if torch.cuda.is_available() else "cpu"
        self.model = VisionTransformer(cfg).to(self.device)
        decay = [p for p in self.model.parameters() if p.ndim >= 2]
        other = [p for p in self.model.parameters() if p.ndim < 2]
        self.opt = torch.optim.AdamW([{"params": decay, "weight_decay": cfg.weight_decay},
                                      {"params": other, "weight_decay": 0.0}], lr=cfg.lr)
        self.sched = torch.optim.lr_scheduler.LambdaLR(self.opt, cosine_with_warmup(cfg))
        self.data = iter(DeviceSyntheticImages(cfg, self.device))

    def step(self, images, labels):
        with torch.autocast(self.device, dtype=torch.bfloat16, enabled=self.device == "cuda"):
            logits = self.model(images)
        loss = F.cross_entropy(logits.float(), labels, label_smoothing=self.cfg.label_smoothing)
        self.opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(self.model.parameters(), 1.0)
        self.opt.step()
        self.sched.step()
        return loss.detach()

    def run(self):
        self.model.train()
        t0 = time.perf_counter()
        for i in range(self.cfg.steps):
            loss = self.step(*next(self.data))
            if i % self.cfg.log_every == 0:
                print(f"it {i:4d} loss {loss.item():.4f} lr {self.sched.get_last_lr()[0]:.2e} "
                      f"{time.perf_counter() - t0:.1f}s", flush=True)


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=300)
    cfg = Config(steps=ap.parse_args().steps)
    Runner(cfg).run()
