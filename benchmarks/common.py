"""What several benchmark scripts share: the step timer, the CIFAR-style data, small factories.

Library code (the engine, the tuner, the units, the atomic writer) is imported from ``gpudoctor``;
this module holds only what belongs to the benchmarks themselves, so that each is written once:

* :class:`StepTimer` — throughput between two optimizer steps, timed with CUDA events from an
  optimizer step post-hook (it fires in every framework, all of them end in
  ``torch.optim.Optimizer.step``); the one sync is in :meth:`StepTimer.result`. Used by
  ``peers.py``, ``engine_vs_hand.py`` and ``scaling_worker.py``.
* :class:`CifarStyle` — the seeds' basic user's data: ``n`` uint8 32x32 images in memory with
  per-sample CPU augmentation (reflect pad 4 + random crop 32, flip, normalise). Used by
  ``peers.py`` and ``tune_job.py``.
* :func:`loss_is_output` — the loss function for models whose forward returns the loss.
"""

from __future__ import annotations

import time

import torch
import torch.nn.functional as F
from torch.utils.data import Dataset

CIFAR_MEAN, CIFAR_STD = (0.4914, 0.4822, 0.4465), (0.2470, 0.2435, 0.2616)


class StepTimer:
    """CUDA events after optimizer step ``warmup`` and step ``warmup + timed`` (host syncs: none
    until :meth:`result`). On the CPU (``--smoke``) the wall clock stands in for the events."""

    def __init__(self, optimizer: torch.optim.Optimizer, warmup: int, timed: int) -> None:
        self.warmup, self.timed, self.count = warmup, timed, 0
        self.optimizer, self.cuda, self.events = optimizer, False, []
        self.t_init, self.walls = time.perf_counter(), [0.0, 0.0]
        self.handle = optimizer.register_step_post_hook(self._hook)

    def _hook(self, *_: object) -> None:
        if self.count == 0:  # where the parameters are once training runs (a framework may move them late)
            params = [p for group in self.optimizer.param_groups for p in group["params"]]
            self.cuda = bool(params) and params[0].device.type == "cuda"
            self.events = [torch.cuda.Event(enable_timing=True) for _ in range(2)] if self.cuda else []
        self.count += 1
        for i, at in enumerate((self.warmup, self.warmup + self.timed)):
            if self.count == at:
                if self.cuda:
                    self.events[i].record()
                self.walls[i] = time.perf_counter()

    def seconds(self) -> float:
        """The timed steps' time; stops the timer (the one host-device sync, at the end)."""
        self.handle.remove()
        if self.count < self.warmup + self.timed:
            raise RuntimeError(f"only {self.count} optimizer steps ran; expected {self.warmup + self.timed}")
        if self.cuda:
            self.events[1].synchronize()
            return self.events[0].elapsed_time(self.events[1]) / 1e3
        return self.walls[1] - self.walls[0]

    def result(self, per_step: int, unit: str = "") -> dict:
        """``{unit}_per_s`` (``per_s`` without a unit) over the timed steps, the seconds, and the
        warm-up's wall time from the timer's creation (it includes torch.compile's first compile)."""
        seconds = self.seconds()
        key = f"{unit}_per_s" if unit else "per_s"
        return {key: per_step * self.timed / seconds, "timed_steps": self.timed, "warmup_steps": self.warmup,
                "seconds": seconds, "warmup_wall_s": round(self.walls[0] - self.t_init, 2)}


class CifarStyle(Dataset):
    """``n`` uint8 HWC 32x32 images in memory; per-sample CPU augmentation (the seeds' basic user)."""

    def __init__(self, n: int, seed: int = 0, augment: bool = True) -> None:
        g = torch.Generator().manual_seed(seed)
        self.images = torch.randint(0, 256, (n, 32, 32, 3), dtype=torch.uint8, generator=g)
        self.labels = torch.randint(0, 10, (n,), generator=g)
        self.mean = torch.tensor(CIFAR_MEAN).view(3, 1, 1)
        self.std = torch.tensor(CIFAR_STD).view(3, 1, 1)
        self.augment = augment

    def __len__(self) -> int:
        return len(self.images)

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        img = self.images[i].permute(2, 0, 1).float().div_(255)  # CHW
        if self.augment:
            img = F.pad(img.unsqueeze(0), (4, 4, 4, 4), mode="reflect").squeeze(0)
            dy, dx = torch.randint(0, 9, (2,)).tolist()
            img = img[:, dy:dy + 32, dx:dx + 32]
            if torch.rand(()) < 0.5:
                img = img.flip(2)
        return (img - self.mean) / self.std, self.labels[i]


def loss_is_output(loss: torch.Tensor, _target: object) -> torch.Tensor:
    """The engine's ``loss_fn`` for a model whose forward returns the loss (the GPT of models.py)."""
    return loss
