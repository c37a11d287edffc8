import os
import time

import torch


class Checkpoint:
    """Keeps the newest ``n_saved`` training checkpoints in ``dirname``."""

    def __init__(self, to_save, dirname, prefix="ckpt", n_saved=2):
        self.to_save = to_save
        self.dirname = dirname
        self.prefix = prefix
        self.n_saved = n_saved
        self._saved = []
        os.makedirs(dirname, exist_ok=True)

    def __call__(self, engine):
        path = os.path.join(self.dirname, f"{self.prefix}_{engine.state.iteration:07d}.pt")
        obj = {k: v.state_dict() for k, v in self.to_save.items()}
        obj["iteration"] = engine.state.iteration
        torch.save(obj, path)
        self._saved.append(path)
        while len(self._saved) > self.n_saved:
            old = self._saved.pop(0)
            if os.path.exists(old):
                os.remove(old)


class ProgressPrinter:
    def __init__(self):
        self.t0 = time.perf_counter()

    def __call__(self, engine):
        loss = engine.state.output
        print(f"iter {engine.state.iteration:6d}/{engine.state.max_iters}  loss {loss.item():.4f}"
              f"  {time.perf_counter() - self.t0:.1f}s", flush=True)
