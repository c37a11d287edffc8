"""A small, dependency-free trainer with callback hooks (in the spirit of Lightning/Keras)."""
import os
import time

import torch


class Callback:
    def on_train_start(self, trainer): ...
    def on_step_end(self, trainer, step, loss): ...
    def on_train_end(self, trainer): ...


class Trainer:
    def __init__(self, model, optimizer, batch_fn, loss_fn, device, callbacks=(), amp_dtype=torch.bfloat16):
        self.model = model
        self.optimizer = optimizer
        self.batch_fn = batch_fn
        self.loss_fn = loss_fn
        self.device = device
        self.callbacks = list(callbacks)
        self.amp_dtype = amp_dtype
        self.global_step = 0

    def _emit(self, name, *args):
        for cb in self.callbacks:
            getattr(cb, name)(self, *args)

    def training_step(self, batch):
        x, y = batch
        with torch.autocast(device_type=self.device, dtype=self.amp_dtype):
            pred = self.model(x)
        return self.loss_fn(pred.float(), y)

    def fit(self, max_steps):
        self.model.train()
        self._emit("on_train_start")
        while self.global_step < max_steps:
            batch = self.batch_fn()
            loss = self.training_step(batch)
            self.optimizer.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(self.model.parameters(), 1.0)
            self.optimizer.step()
            self.global_step += 1
            self._emit("on_step_end", self.global_step, loss.detach())
        self._emit("on_train_end")


class LossPrinter(Callback):
    def __init__(self, every=50):
        self.every = every
        self.t0 = None

    def on_train_start(self, trainer):
        self.t0 = time.time()

    def on_step_end(self, trainer, step, loss):
        if step % self.every == 0 or step == 1:
            print(f"step {step:5d} loss {loss.item():.5f} ({time.time() - self.t0:.1f}s)", flush=True)


class ModelCheckpoint(Callback):
    """Writes model + optimizer state; keeps the newest `keep_last` files."""

    def __init__(self, dirpath, every_n_steps=None, keep_last=2):
        self.dirpath = dirpath
        self.every_n_steps = every_n_steps
        self.keep_last = keep_last
        self._written = []
        os.makedirs(dirpath, exist_ok=True)

    def _save(self, trainer):
        path = os.path.join(self.dirpath, f"step{trainer.global_step:07d}.pt")
        torch.save({
            "step": trainer.global_step,
            "model": trainer.model.state_dict(),
            "optimizer": trainer.optimizer.state_dict(),
        }, path)
        self._written.append(path)
        while len(self._written) > self.keep_last:
            old = self._written.pop(0)
            if os.path.exists(old):
                os.remove(old)

    def on_step_end(self, trainer, step, loss):
        if self.every_n_steps and step % self.every_n_steps == 0:
            self._save(trainer)

    def on_train_end(self, trainer):
        self._save(trainer)
