import time

import torch


class Callback:
    def set_trainer(self, trainer):
        self.trainer = trainer

    def on_train_begin(self, logs=None): ...
    def on_train_batch_begin(self, batch, logs=None): ...
    def on_train_batch_end(self, batch, logs=None): ...
    def on_train_end(self, logs=None): ...


class CallbackList:
    def __init__(self, callbacks, trainer):
        self.callbacks = list(callbacks)
        for cb in self.callbacks:
            cb.set_trainer(trainer)

    def __getattr__(self, name):
        def fire(*args, **kwargs):
            for cb in self.callbacks:
                getattr(cb, name)(*args, **kwargs)
        return fire


class ProgbarLogger(Callback):
    def __init__(self, every=50):
        self.every = every

    def on_train_begin(self, logs=None):
        self.t0 = time.perf_counter()

    def on_train_batch_end(self, batch, logs=None):
        if batch % self.every == 0:
            print(f"batch {batch:5d}  loss {logs['loss'].item():.4f}  "
                  f"{time.perf_counter() - self.t0:.1f}s", flush=True)


class ReleaseCachedMemory(Callback):
    """Hand cached blocks back to the driver after each batch.

    The validation worker shares this card and was hitting OOM while the
    trainer sat on its cached pool.
    """

    def on_train_batch_end(self, batch, logs=None):
        if torch.cuda.is_available():
            torch.cuda.empty_cache()


class WarmupCosine(Callback):
    def __init__(self, base_lr, warmup, total):
        self.base_lr, self.warmup, self.total = base_lr, warmup, total

    def on_train_batch_begin(self, batch, logs=None):
        import math
        if batch < self.warmup:
            lr = self.base_lr * (batch + 1) / self.warmup
        else:
            lr = self.base_lr * 0.5 * (1 + math.cos(math.pi * batch / max(1, self.total)))
        for g in self.trainer.optimizer.param_groups:
            g["lr"] = lr
