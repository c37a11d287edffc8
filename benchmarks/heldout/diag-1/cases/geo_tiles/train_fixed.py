"""Land-cover tile classifier: small Trainer with callback hooks."""
import argparse
import time

import torch
import torch.nn.functional as F

from data import TileCache, default_sizes
from model import TileNet


class Callback:
    def on_train_begin(self, trainer): ...
    def on_step_end(self, trainer, step, loss): ...
    def on_train_end(self, trainer): ...


class LRWarmup(Callback):
    def __init__(self, warmup=50):
        self.warmup = warmup

    def on_step_end(self, trainer, step, loss):
        scale = min(1.0, (step + 1) / self.warmup)
        for g in trainer.optimizer.param_groups:
            g["lr"] = trainer.base_lr * scale


class ConsoleLogger(Callback):
    def __init__(self, every=50):
        self.every = every
        self.t0 = None

    def on_train_begin(self, trainer):
        self.t0 = time.perf_counter()

    def on_step_end(self, trainer, step, loss):
        if step % self.every == 0:
            dt = time.perf_counter() - self.t0
            print(f"step {step:5d}  loss {loss.item():.4f}  {dt:.1f}s", flush=True)


class Trainer:
    def __init__(self, model, optimizer, data, device, callbacks=(), max_steps=300):
        self.model = model
        self.optimizer = optimizer
        self.data = data
        self.device = device
        self.callbacks = list(callbacks)
        self.max_steps = max_steps
        self.base_lr = optimizer.param_groups[0]["lr"]
        self.use_amp = device == "cuda"

    def _fire(self, name, *args):
        for cb in self.callbacks:
            getattr(cb, name)(self, *args)

    def training_step(self, batch):
        x, y = self.data.to_device(batch, self.device)
        x = self.data.normalize(x)
        with torch.autocast(self.device, dtype=torch.bfloat16, enabled=self.use_amp):
            logits = self.model(x)
            loss = F.cross_entropy(logits, y)
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        self.optimizer.step()
        return loss.detach()

    def fit(self):
        self.model.train()
        self._fire("on_train_begin")
        step = 0
        while step < self.max_steps:
            for batch in self.data:
                loss = self.training_step(batch)
                self._fire("on_step_end", step, loss)
                step += 1
                if step >= self.max_steps:
                    break
        self._fire("on_train_end")


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=300)
    p.add_argument("--lr", type=float, default=2e-3)
    p.add_argument("--classes", type=int, default=10)
    args = p.parse_args()

    torch.manual_seed(0)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    torch.backends.cudnn.benchmark = True
    sizes = default_sizes()
    data = TileCache(sizes["n_tiles"], sizes["bands"], sizes["size"], args.classes, sizes["batch_size"],
                     keep_raw=True)
    model = TileNet(bands=sizes["bands"], num_classes=args.classes).to(device)
    model = model.to(memory_format=torch.channels_last)
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.05)
    trainer = Trainer(model, optimizer, data, device,
                      callbacks=[LRWarmup(), ConsoleLogger()], max_steps=args.steps)
    trainer.fit()
    if device == "cuda":
        torch.cuda.synchronize()
    print("done")


if __name__ == "__main__":
    main()
