"""benchmarks/common.py: the step timer the peer, engine and scaling benchmarks share, and the
CIFAR-style data (CPU)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest
import torch

BENCHMARKS = Path(__file__).resolve().parents[3] / "benchmarks"


@pytest.fixture(scope="module")
def common():
    spec = importlib.util.spec_from_file_location("benchmarks_common", BENCHMARKS / "common.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def _steps(opt: torch.optim.Optimizer, model: torch.nn.Module, n: int) -> None:
    for _ in range(n):
        model(torch.randn(4, 3)).sum().backward()
        opt.step()
        opt.zero_grad()


def test_step_timer_counts_the_timed_steps_only(common) -> None:
    model = torch.nn.Linear(3, 2)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    timer = common.StepTimer(opt, warmup=2, timed=3)
    _steps(opt, model, 6)
    out = timer.result(per_step=4, unit="img")
    assert not timer.cuda and out["timed_steps"] == 3 and out["warmup_steps"] == 2
    assert out["img_per_s"] == pytest.approx(4 * 3 / out["seconds"])
    assert "per_s" not in out
    _steps(opt, model, 1)  # the hook is gone after result()
    assert timer.count == 6


def test_step_timer_says_when_too_few_steps_ran(common) -> None:
    model = torch.nn.Linear(3, 2)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    timer = common.StepTimer(opt, warmup=2, timed=3)
    _steps(opt, model, 4)
    with pytest.raises(RuntimeError, match="only 4 optimizer steps ran; expected 5"):
        timer.result(per_step=1)


def test_cifar_style_augments_training_data_only(common) -> None:
    train, plain = common.CifarStyle(8, seed=0), common.CifarStyle(8, seed=0, augment=False)
    x, y = train[0]
    assert x.shape == (3, 32, 32) and x.dtype == torch.float32 and 0 <= int(y) < 10
    assert torch.equal(plain[3][0], plain[3][0])  # no randomness without augmentation
    assert len(train) == 8
