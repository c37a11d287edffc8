"""A tiny engine target for the tune tests: a 2-layer MLP on 256 random samples, CPU, fp32.

``oom_target`` simulates a GPU memory limit on the CPU: its model raises a real
``torch.OutOfMemoryError`` when a batch larger than ``LIMIT`` goes through it.
"""

from __future__ import annotations

import torch
from torch import nn
from torch.utils.data import TensorDataset

from gpudoctor.train import presets
from gpudoctor.tune.target import LoaderSettings, TuneTarget

LIMIT = 100


def _data(n: int, seed: int) -> TensorDataset:
    g = torch.Generator().manual_seed(seed)
    return TensorDataset(torch.randn(n, 8, generator=g), torch.randint(0, 3, (n,), generator=g))


class Limited(nn.Module):
    """An MLP whose forward raises ``torch.OutOfMemoryError`` above ``limit`` samples (more in eval:
    no activations are kept for the backward pass)."""

    def __init__(self, limit: int) -> None:
        super().__init__()
        self.limit = limit
        self.net = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 3))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        limit = self.limit if self.training else 2 * self.limit
        if x.shape[0] > limit:
            raise torch.OutOfMemoryError(f"simulated: batch {x.shape[0]} > {limit}")
        return self.net(x)


def target() -> TuneTarget:
    return TuneTarget(
        model_factory=lambda: Limited(10_000),
        optimizer_factory=lambda params: torch.optim.SGD(params, lr=0.05),
        loss_fn=nn.CrossEntropyLoss(),
        train_dataset=_data(256, 0),
        eval_dataset=_data(128, 1),
        config=presets.cpu_debug().replace(batch_size=16),
        loader=LoaderSettings(num_workers=0),
    )


def oom_target() -> TuneTarget:
    base = target()
    return TuneTarget(model_factory=lambda: Limited(LIMIT), optimizer_factory=base.optimizer_factory,
                      loss_fn=base.loss_fn, train_dataset=base.train_dataset, eval_dataset=base.eval_dataset,
                      config=base.config, loader=base.loader)


def uneven_target() -> TuneTarget:
    """Like ``oom_target``, but rank 1 (under torchrun) has less memory: a limit of 60."""
    import os

    limit = 60 if os.environ.get("RANK") == "1" else LIMIT
    base = target()
    return TuneTarget(model_factory=lambda: Limited(limit), optimizer_factory=base.optimizer_factory,
                      loss_fn=base.loss_fn, train_dataset=base.train_dataset, eval_dataset=base.eval_dataset,
                      config=base.config, loader=base.loader)


class _SlowInTrainer(torch.utils.data.Dataset):
    """``TensorDataset`` samples that take 1 ms each to read in the training process and none in a
    DataLoader worker: the loader knob's sweep always picks workers, so every pair runs."""

    def __init__(self, data: TensorDataset) -> None:
        self.data = data

    def __len__(self) -> int:
        return len(self.data)

    def __getitem__(self, i: int):
        import time

        if torch.utils.data.get_worker_info() is None:
            time.sleep(0.001)
        return self.data[i]


def loader_target() -> TuneTarget:
    """Like ``target``, with a dataset that is slow to read in the training process (workers win)."""
    base = target()
    return TuneTarget(model_factory=base.model_factory, optimizer_factory=base.optimizer_factory,
                      loss_fn=base.loss_fn, train_dataset=_SlowInTrainer(base.train_dataset),
                      eval_dataset=base.eval_dataset, config=base.config, loader=base.loader)
