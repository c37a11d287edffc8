"""The engine's defaults and its optimizer-factory contract (issue 5's first H200 run found both wrong).

* ``gpudoctor_compiled`` crashed because ``benchmarks/peers.py`` passed a ``model -> optimizer`` function
  where ``Trainer`` documents (and calls) ``params -> optimizer``.
* ``resnet/gpudoctor_defaults`` ran at 0.61x the hand-tuned loop: the defaults left channels-last off
  for a convolution net on the GPU. ``perf.channels_last`` now defaults to auto.
"""

from __future__ import annotations

import pytest
import torch
from helpers_train import cpu_config, tiny_loader, tiny_model
from torch import nn

from gpudoctor.train import Trainer, TrainConfig
from gpudoctor.train.config import PerfConfig
from gpudoctor.train.perf import resolve_channels_last


def test_optimizer_factory_receives_parameters_not_the_model() -> None:
    seen = []

    def factory(params):
        params = list(params)
        seen.append(params)
        return torch.optim.SGD(params, lr=0.1)

    model = tiny_model()
    trainer = Trainer(model, factory, nn.CrossEntropyLoss(), config=cpu_config(max_steps=2))
    assert len(seen) == 1
    assert all(isinstance(p, nn.Parameter) for p in seen[0])
    assert {id(p) for p in seen[0]} == {id(p) for p in model.parameters()}
    result = trainer.fit(tiny_loader(), epochs=1)
    assert result.steps == 2


def test_a_model_taking_factory_fails_loudly() -> None:
    """The crash the H200 run hit: a ``model -> optimizer`` function is not the engine's contract."""
    with pytest.raises(AttributeError, match="parameters"):
        Trainer(tiny_model(), lambda model: torch.optim.SGD(model.parameters(), lr=0.1), nn.CrossEntropyLoss(),
                config=cpu_config())


class _Conv(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.conv(x).mean((2, 3))


@pytest.mark.parametrize(("setting", "model", "device", "expected"), [
    (None, _Conv, "cuda", True),  # the default for a convnet on a GPU: NHWC
    (None, _Conv, "cpu", False),
    (None, tiny_model, "cuda", False),  # no convolution: nothing to gain, a .view could break
    (False, _Conv, "cuda", False),
    (True, tiny_model, "cpu", True),
])
def test_channels_last_auto(setting, model, device, expected) -> None:
    assert resolve_channels_last(setting, model(), torch.device(device)) is expected


def test_channels_last_default_is_auto_and_validated() -> None:
    assert TrainConfig().perf.channels_last is None
    with pytest.raises(ValueError, match="channels_last"):
        PerfConfig(channels_last="yes")


def test_channels_last_auto_round_trips_through_toml(tmp_path) -> None:
    path = tmp_path / "c.toml"
    TrainConfig().to_file(path)
    assert TrainConfig.from_file(path).perf.channels_last is None


def test_default_steps_read_no_device_value(monkeypatch) -> None:
    """A steady-state step must not read a device value on the host (each such read is a sync on a GPU).

    On the CPU every ``item()``/``float()`` goes through ``aten._local_scalar_dense``; the engine's
    only one per step is the loss read from its (pinned, on a GPU) host buffer, one per step.
    """
    from torch.utils._python_dispatch import TorchDispatchMode

    class Count(TorchDispatchMode):
        n = 0

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            if func is torch.ops.aten._local_scalar_dense.default:
                Count.n += 1
            return func(*args, **(kwargs or {}))

    steps = 6
    model = tiny_model()
    trainer = Trainer(model, torch.optim.SGD(model.parameters(), lr=0.1), nn.CrossEntropyLoss(),
                      config=cpu_config(max_steps=steps))
    with Count():
        trainer.fit(tiny_loader(), epochs=1)
    # one host-buffer loss read per step + the DataLoader's per-epoch base seed (a CPU tensor)
    assert Count.n == steps + 1


def test_channels_last_auto_is_off_under_fsdp2() -> None:
    # fully_shard refuses NHWC weights (NotImplementedError), before or after sharding: auto = off
    assert resolve_channels_last(None, _Conv(), torch.device("cuda"), sharded=True) is False
    assert resolve_channels_last(False, _Conv(), torch.device("cuda"), sharded=True) is False


def test_channels_last_forced_on_under_fsdp2_says_what_to_do() -> None:
    with pytest.raises(ValueError, match=r"channels_last=true cannot be used with parallel.strategy='fsdp'.*"
                                         r"set perf.channels_last to false"):
        resolve_channels_last(True, _Conv(), torch.device("cuda"), sharded=True)
