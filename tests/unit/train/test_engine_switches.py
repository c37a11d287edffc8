"""Engine switches on the CPU: deterministic mode, SyncBatchNorm, the loader's start method, the
uint8 collate, and the gradient norm in the step records."""

from __future__ import annotations

import os

import numpy as np
import pytest
import torch
from torch import nn

from gpudoctor.core.dist import DistEnv
from gpudoctor.train import Engine, PerfConfig, Trainer, fast_loader, normalize_on_device, uint8_collate
from gpudoctor.train.config import ParallelConfig, PrecisionConfig
from gpudoctor.train.parallel import Parallel, sync_batchnorm
from gpudoctor.train.perf import CUBLAS_WORKSPACE, prepare_deterministic

from helpers_train import Recorder, cpu_config, tiny_data, tiny_loader, tiny_model


@pytest.fixture
def restore_determinism(monkeypatch):
    monkeypatch.delenv("CUBLAS_WORKSPACE_CONFIG", raising=False)
    before = (torch.are_deterministic_algorithms_enabled(), torch.backends.cudnn.deterministic,
              torch.backends.cudnn.benchmark, torch.is_deterministic_algorithms_warn_only_enabled())
    yield
    torch.use_deterministic_algorithms(before[0], warn_only=before[3])
    torch.backends.cudnn.deterministic, torch.backends.cudnn.benchmark = before[1], before[2]


def test_deterministic_mode_sets_the_three_switches(restore_determinism) -> None:
    Engine(cpu_config(perf=PerfConfig(deterministic=True)))
    assert torch.are_deterministic_algorithms_enabled()
    assert not torch.is_deterministic_algorithms_warn_only_enabled()
    assert torch.backends.cudnn.deterministic and not torch.backends.cudnn.benchmark
    assert os.environ["CUBLAS_WORKSPACE_CONFIG"] == CUBLAS_WORKSPACE


def test_deterministic_warn_only(restore_determinism) -> None:
    Engine(cpu_config(perf=PerfConfig(deterministic=True, deterministic_warn_only=True)))
    assert torch.are_deterministic_algorithms_enabled() and torch.is_deterministic_algorithms_warn_only_enabled()


def test_deterministic_mode_keeps_a_users_cublas_setting_and_is_off_by_default(restore_determinism,
                                                                                monkeypatch) -> None:
    monkeypatch.setenv("CUBLAS_WORKSPACE_CONFIG", ":16:8")
    assert prepare_deterministic(PerfConfig(deterministic=True)) == ""
    assert os.environ["CUBLAS_WORKSPACE_CONFIG"] == ":16:8"
    assert prepare_deterministic(PerfConfig()) == ""
    assert PerfConfig().deterministic is False


def test_deterministic_runs_repeat_bit_for_bit(restore_determinism) -> None:
    losses = []
    for _ in range(2):
        model, rec = tiny_model(), Recorder()
        torch.manual_seed(0)
        Trainer(model, torch.optim.SGD(model.parameters(), lr=0.05), nn.CrossEntropyLoss(),
                config=cpu_config(perf=PerfConfig(deterministic=True)), observers=[rec]).fit(tiny_loader(), epochs=1)
        losses.append(rec.losses)
    assert losses[0] == losses[1] and len(losses[0]) == 8


def _bn_model() -> nn.Module:
    return nn.Sequential(nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4), nn.ReLU())


def test_sync_batchnorm_converts_only_for_several_processes() -> None:
    single = Parallel(ParallelConfig(strategy="none", sync_batchnorm=True), DistEnv(), torch.device("cpu"))
    assert isinstance(single.wrap(_bn_model())[1], nn.BatchNorm2d)
    on = ParallelConfig(sync_batchnorm=True)
    for strategy in ("ddp", "fsdp"):  # what wrap does before DDP/fully_shard (SyncBatchNorm runs on CUDA only)
        assert isinstance(sync_batchnorm(_bn_model(), on, strategy)[1], nn.SyncBatchNorm)
    assert isinstance(sync_batchnorm(_bn_model(), ParallelConfig(), "ddp")[1], nn.BatchNorm2d)
    assert ParallelConfig().sync_batchnorm is False


def test_fast_loader_takes_a_start_method() -> None:
    loader = fast_loader(tiny_data(), 8, num_workers=1, multiprocessing_context="forkserver", pin_memory=False,
                         env=DistEnv())
    assert loader.multiprocessing_context.get_start_method() == "forkserver"
    assert fast_loader(tiny_data(), 8, num_workers=0, env=DistEnv(), pin_memory=False).multiprocessing_context is None
    with pytest.raises(ValueError, match="use None, 'fork', 'spawn' or 'forkserver'"):
        fast_loader(tiny_data(), 8, num_workers=1, multiprocessing_context="threads", env=DistEnv())


def test_uint8_collate_keeps_bytes_and_normalises_like_torchvision() -> None:
    g = torch.Generator().manual_seed(0)
    images = [torch.randint(0, 256, (3, 4, 5), dtype=torch.uint8, generator=g) for _ in range(3)]
    x, y = uint8_collate([(im, i) for i, im in enumerate(images)])
    assert x.dtype == torch.uint8 and x.shape == (3, 3, 4, 5) and y.tolist() == [0, 1, 2]
    hwc = [(np.ascontiguousarray(im.permute(1, 2, 0).numpy()), 0) for im in images]  # PIL-like arrays
    assert torch.equal(uint8_collate(hwc)[0], x)
    mean, std = (0.5, 0.4, 0.3), (0.2, 0.25, 0.3)
    expected = (x.float() / 255 - torch.tensor(mean).view(1, 3, 1, 1)) / torch.tensor(std).view(1, 3, 1, 1)
    assert torch.allclose(normalize_on_device(x, mean, std), expected, atol=1e-5)
    with pytest.raises(TypeError, match="not uint8"):
        uint8_collate([(torch.zeros(3, 2, 2), 0)])
    with pytest.raises(ValueError, match="crop or resize"):
        uint8_collate([(images[0], 0), (torch.zeros(3, 2, 2, dtype=torch.uint8), 1)])


def test_step_records_carry_the_clipped_gradient_norm() -> None:
    model, rec = tiny_model(dropout=0.0), Recorder()
    config = cpu_config(precision=PrecisionConfig(dtype="fp32", grad_clip_norm=1.0))
    Trainer(model, torch.optim.SGD(model.parameters(), lr=0.05), nn.CrossEntropyLoss(), config=config,
            observers=[rec]).fit(tiny_loader(), epochs=1)
    norms = [r.grad_norm for r in rec.records]
    assert len(norms) == 8 and all(n is not None and n > 0 for n in norms)
    # the first step's norm, by hand: the same model, batch and loss
    ref = tiny_model(dropout=0.0)
    x, y = next(iter(tiny_loader()))
    nn.CrossEntropyLoss()(ref(x), y).backward()
    by_hand = float(torch.nn.utils.clip_grad_norm_(ref.parameters(), 1.0))
    assert norms[0] == pytest.approx(by_hand, rel=1e-6)
    rec2 = Recorder()
    m2 = tiny_model()
    Trainer(m2, torch.optim.SGD(m2.parameters(), lr=0.05), nn.CrossEntropyLoss(), config=cpu_config(),
            observers=[rec2]).fit(tiny_loader(), epochs=1)
    assert all(r.grad_norm is None for r in rec2.records)  # no clipping: nothing read, nothing added
