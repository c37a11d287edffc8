"""Data building blocks: move_to_device, split_batch, fast_loader, the prefetcher, the GPU loader."""

from __future__ import annotations

import dataclasses
from collections import namedtuple

import torch

from gpudoctor.core.dist import DistEnv
from gpudoctor.train import NO_AUGMENT, CudaPrefetcher, GpuAugment, GpuLoader, fast_loader, move_to_device
from gpudoctor.train.data import batch_size_of, default_num_workers, split_batch

from helpers_train import tiny_data


@dataclasses.dataclass
class Batch:
    x: torch.Tensor
    meta: str


Pair = namedtuple("Pair", "a b")


class _Spy(torch.Tensor):
    pass


def test_move_to_device_walks_nested_structures(monkeypatch):
    calls = []
    real_to = torch.Tensor.to

    def spy(self, *args, **kwargs):
        calls.append(kwargs.get("non_blocking"))
        return real_to(self, *args, **kwargs)

    monkeypatch.setattr(torch.Tensor, "to", spy)
    batch = {"img": torch.ones(2, 3), "pair": Pair(torch.zeros(2), [torch.ones(1), 7]),
             "dc": Batch(torch.ones(2), "keep"), "t": (torch.ones(2),), "name": "x"}
    out = move_to_device(batch, torch.device("cpu"))
    assert calls == [True] * 5
    assert isinstance(out["pair"], Pair) and out["pair"].b[1] == 7 and isinstance(out["pair"].b, list)
    assert isinstance(out["dc"], Batch) and out["dc"].meta == "keep"
    assert isinstance(out["t"], tuple) and out["name"] == "x"
    assert batch_size_of(out) == 2


def test_split_batch_keeps_structure():
    batch = {"x": torch.arange(8).view(8, 1), "y": (torch.arange(8), torch.arange(8))}
    parts = split_batch(batch, 4)
    assert len(parts) == 4 and parts[1]["x"].flatten().tolist() == [2, 3]
    assert isinstance(parts[3]["y"], tuple) and parts[3]["y"][0].tolist() == [6, 7]


def test_fast_loader_defaults_and_sharding():
    env = DistEnv(rank=1, world_size=2, local_world_size=2)
    loader = fast_loader(tiny_data(64), 8, env=env, num_workers=0)
    assert loader.sampler.num_replicas == 2 and loader.sampler.rank == 1 and len(loader) == 4
    assert default_num_workers(DistEnv(world_size=64, local_world_size=64)) == 1
    loader.sampler.set_start(16)
    assert len(loader.sampler) == 16 and len(list(loader.sampler)) == 16 and len(loader.sampler) == 32
    with_workers = fast_loader(tiny_data(64), 8, num_workers=1, pin_memory=False)
    assert with_workers.persistent_workers and with_workers.prefetch_factor == 4


def test_prefetcher_on_cpu_passes_batches_through():
    loader = fast_loader(tiny_data(32), 8, num_workers=0, shuffle=False, pin_memory=False)
    pre = CudaPrefetcher(loader, torch.device("cpu"))
    got = [x for x, _ in pre]
    assert len(got) == len(pre) == 4 and torch.equal(torch.cat(got), tiny_data(32).tensors[0])
    assert pre.sampler is loader.sampler  # forwarded, so the engine can set_epoch through it


def _images(n=20):
    g = torch.Generator().manual_seed(0)
    return torch.randint(0, 256, (n, 8, 8, 3), dtype=torch.uint8, generator=g), torch.arange(n)


def test_gpu_loader_normalises_without_augmentation():
    x, y = _images()
    loader = GpuLoader(x, y, 5, torch.device("cpu"), augment=NO_AUGMENT, shuffle=False, channels_last=False)
    images, labels = next(iter(loader))
    expected = (x[:5].permute(0, 3, 1, 2).float() / 255 - torch.tensor(NO_AUGMENT.mean).view(1, 3, 1, 1)) \
        / torch.tensor(NO_AUGMENT.std).view(1, 3, 1, 1)
    torch.testing.assert_close(images, expected)
    assert labels.tolist() == [0, 1, 2, 3, 4] and len(loader) == 4


def test_gpu_loader_crop_flip_shapes_and_determinism():
    x, y = _images()
    loader = GpuLoader(x, y, 4, torch.device("cpu"), augment=GpuAugment(crop_padding=2), seed=1)
    first = [b for b, _ in loader]
    assert first[0].shape == (4, 3, 8, 8) and first[0].is_contiguous(memory_format=torch.channels_last)
    again = [b for b, _ in loader]
    assert all(torch.equal(a, b) for a, b in zip(first, again))  # same epoch -> same draws
    loader.set_start_batch(3)
    tail = [b for b, _ in loader]
    assert len(tail) == 2 and torch.equal(tail[0], first[3])  # resume mid-epoch without replay
    loader.set_epoch(1)
    assert not torch.equal(next(iter(loader))[0], first[0])


def test_gpu_loader_shards_by_rank():
    x, y = _images(20)
    seen = []
    for rank in (0, 1):
        loader = GpuLoader(x, y, 5, torch.device("cpu"), env=DistEnv(rank=rank, world_size=2))
        seen += [int(v) for _, labels in loader for v in labels]
    assert sorted(seen) == list(range(20))
