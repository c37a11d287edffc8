"""GD104 and Datasets of literal tensors (twelfth held-out round: rasbt/LLMs-from-scratch's
appendix A builds `ToyDataset(X_train, y_train)` from `torch.tensor([[-1.2, 3.1], ...])`, five rows,
and the DDP script loads it with a DistributedSampler on CUDA; 7 of the round's 13 GD104 false
positives). A loader over numbers typed into the source has nothing to load in workers or worth
pinning. A Dataset over computed or loaded tensors still gets the advice."""

from __future__ import annotations

from gpudoctor.lint.config import LintConfig
from gpudoctor.lint.engine import lint_text
from gpudoctor.lint.registry import select_rules

TOY = """\
import torch
from torch.utils.data import DataLoader, Dataset


class ToyDataset(Dataset):
    def __init__(self, X, y):
        self.features = X
        self.labels = y

    def __getitem__(self, index):
        return self.features[index], self.labels[index]

    def __len__(self):
        return self.labels.shape[0]


def prepare_dataset():
    X_train = {x_train}
    y_train = torch.tensor([0, 0, 1, 1])
    train_ds = ToyDataset(X_train, y_train)
    return DataLoader(dataset=train_ds, batch_size=2, shuffle=True)


device = torch.device("cuda")
"""


def _codes(x_train: str) -> list[str]:
    source = TOY.format(x_train=x_train)
    return [v.code for v in lint_text(source, "toy.py", select_rules(["GD104"]), LintConfig())]


def test_a_loader_over_literal_tensors_is_not_reported() -> None:
    assert _codes("torch.tensor([[-1.2, 3.1], [-0.9, 2.9], [2.3, -1.1], [2.7, -1.5]])") == []


def test_a_loader_over_random_tensors_is_still_reported() -> None:
    assert _codes("torch.randn(100_000, 2)") == ["GD104"]


def test_a_loader_over_a_tensor_of_loaded_data_is_still_reported() -> None:
    assert _codes("torch.tensor(np.load('features.npy'))") == ["GD104"]


def test_a_loader_over_a_tensor_of_a_list_comprehension_is_still_reported() -> None:
    assert _codes("torch.tensor([[float(v) for v in row] for row in open('data.csv')])") == ["GD104"]
