"""Tiny models and data shared by the engine's CPU tests (kept small: 2 shared cores)."""

from __future__ import annotations

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from gpudoctor.train import TrainConfig, presets


def tiny_model(seed: int = 0, dropout: float = 0.1) -> nn.Module:
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Dropout(dropout), nn.Linear(16, 3))


def tiny_data(n: int = 64, seed: int = 1) -> TensorDataset:
    g = torch.Generator().manual_seed(seed)
    return TensorDataset(torch.randn(n, 8, generator=g), torch.randint(0, 3, (n,), generator=g))


def tiny_loader(batch_size: int = 8, n: int = 64) -> DataLoader:
    return DataLoader(tiny_data(n), batch_size=batch_size, shuffle=False)


def cpu_config(**changes) -> TrainConfig:
    return presets.cpu_debug().replace(**changes)


class Recorder:
    """An observer that keeps every step record."""

    def __init__(self) -> None:
        self.records = []
        self.started = self.ended = 0

    def on_run_start(self, info: dict) -> None:
        self.started += 1

    def on_step_end(self, record) -> None:
        self.records.append(record)

    def on_run_end(self, records_emitted: int) -> None:
        self.ended += 1

    @property
    def losses(self) -> list[float]:
        return [r.loss for r in self.records]


def plain_loop(model: nn.Module, loader, epochs: int, lr: float = 0.05, seed: int = 0) -> list[float]:
    """The reference: a textbook fp32 PyTorch loop."""
    opt = torch.optim.SGD(model.parameters(), lr=lr, momentum=0.9)
    loss_fn = nn.CrossEntropyLoss()
    torch.manual_seed(seed)
    losses = []
    for _ in range(epochs):
        for x, y in loader:
            loss = loss_fn(model(x), y)
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
            losses.append(loss.item())
    return losses
