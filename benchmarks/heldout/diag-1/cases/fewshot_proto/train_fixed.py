"""Prototypical-network episodes on a ResNet-12 backbone."""
import argparse
import os
import random
import time

import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, Sampler

from backbone import ResNet12
from data import SyntheticFewShot

CONFIG = {
    "data": {"num_classes": 1000, "per_class": 100, "image_size": 84},
    "episode": {"n_way": 16, "k_shot": 5, "n_query": 11},
    "loader": {"num_workers": 6, "prefetch_factor": 4},
    "optim": {"lr": 0.05, "momentum": 0.9, "weight_decay": 5e-4},
    "log_every": 50,
}
if os.environ.get("SMOKE") == "1":
    CONFIG["data"] = {"num_classes": 20, "per_class": 20, "image_size": 32}
    CONFIG["episode"] = {"n_way": 4, "k_shot": 2, "n_query": 3}
    CONFIG["loader"] = {"num_workers": 2, "prefetch_factor": 2}

MEAN = torch.tensor([120.4, 114.8, 103.5]).view(1, 3, 1, 1)
STD = torch.tensor([70.7, 68.8, 72.4]).view(1, 3, 1, 1)


class EpisodeSampler(Sampler):
    """Yields n_way * (k_shot + n_query) indices per episode, grouped by class."""

    def __init__(self, labels, n_way, k_shot, n_query, episodes, seed=0):
        self.labels = labels
        self.classes = sorted(set(labels))
        self.n_way = n_way
        self.per_class = k_shot + n_query
        self.episodes = episodes
        self.rng = random.Random(seed)
        self.by_class = {c: [] for c in self.classes}
        for i, y in enumerate(labels):
            self.by_class[y].append(i)

    def __len__(self):
        return self.episodes

    def __iter__(self):
        for _ in range(self.episodes):
            batch = []
            for c in self.rng.sample(self.classes, self.n_way):
                members = self.by_class[c]
                batch.extend(self.rng.sample(members, self.per_class))
            yield batch


def build_loader(cfg, episodes):
    ds = SyntheticFewShot(cfg["data"]["num_classes"], cfg["data"]["per_class"], cfg["data"]["image_size"])
    sampler = EpisodeSampler(ds.labels, episodes=episodes, **cfg["episode"])
    return DataLoader(ds, batch_sampler=sampler, pin_memory=torch.cuda.is_available(),
                      persistent_workers=cfg["loader"]["num_workers"] > 0, **cfg["loader"])


def proto_loss(feats, n_way, k_shot, n_query):
    feats = feats.view(n_way, k_shot + n_query, -1)
    protos = feats[:, :k_shot].mean(1)
    query = feats[:, k_shot:].reshape(n_way * n_query, -1)
    logits = -torch.cdist(query.float(), protos.float()).pow(2)
    target = torch.arange(n_way, device=feats.device).repeat_interleave(n_query)
    return F.cross_entropy(logits, target), (logits.argmax(1) == target).float().mean()


def train(cfg, steps):
    torch.manual_seed(0)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    torch.backends.cudnn.benchmark = True
    ep = cfg["episode"]
    model = ResNet12().to(device).to(memory_format=torch.channels_last)
    opt = torch.optim.SGD(model.parameters(), nesterov=True, **cfg["optim"])
    mean, std = MEAN.to(device), STD.to(device)
    loader = build_loader(cfg, episodes=steps)
    t0 = time.perf_counter()
    for step, (images, _) in enumerate(loader):
        images = images.to(device, non_blocking=True)
        x = ((images.float() - mean) / std).contiguous(memory_format=torch.channels_last)
        with torch.autocast(device, dtype=torch.bfloat16, enabled=device == "cuda"):
            feats = model(x)
        loss, acc = proto_loss(feats, ep["n_way"], ep["k_shot"], ep["n_query"])
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        if step % cfg["log_every"] == 0:
            print(f"episode {step:5d} loss {loss.item():.3f} acc {acc.item():.3f} "
                  f"({time.perf_counter() - t0:.1f}s)", flush=True)


if __name__ == "__main__":
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=300)
    train(CONFIG, p.parse_args().steps)
