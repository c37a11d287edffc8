"""DDP with a DistributedSampler that is never told the epoch (run it under torchrun).

Without ``sampler.set_epoch(epoch)`` every epoch replays the same permutation on every rank. The
dataset is small so the diagnostic window spans several epochs. Planted: no set_epoch.

    torchrun --standalone --nproc_per_node 2 -m gpudoctor.workloads.ddp_no_set_epoch [--size ...]
"""

from __future__ import annotations

import argparse
import os

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

SIZES = {
    "tiny": dict(batch=32, width=64, batches_per_epoch=4),
    "small": dict(batch=512, width=1024, batches_per_epoch=8),
    "medium": dict(batch=1024, width=2048, batches_per_epoch=8),
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", choices=SIZES, default="small")
    parser.add_argument("--steps", type=int, default=60)
    args = parser.parse_args()
    cfg = SIZES[args.size]
    cuda = torch.cuda.is_available()
    local_rank = int(os.environ.get("LOCAL_RANK", 0))
    if cuda:
        torch.cuda.set_device(local_rank)
    dist.init_process_group("nccl" if cuda else "gloo")
    device = torch.device("cuda", local_rank) if cuda else torch.device("cpu")
    world = dist.get_world_size()
    torch.manual_seed(0)
    w = cfg["width"]

    n = cfg["batch"] * cfg["batches_per_epoch"] * world
    g = torch.Generator().manual_seed(0)
    dataset = TensorDataset(torch.randn(n, w, generator=g), torch.randint(0, 10, (n,), generator=g))
    sampler = DistributedSampler(dataset, shuffle=True)
    loader = DataLoader(dataset, batch_size=cfg["batch"], sampler=sampler, num_workers=2,
                        pin_memory=cuda, persistent_workers=True, drop_last=True)
    model = nn.Sequential(nn.Linear(w, w), nn.ReLU(), nn.Linear(w, 10)).to(device)
    model = DDP(model, device_ids=[local_rank] if cuda else None)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)

    step, epoch = 0, 0
    while step < args.steps:
        for x, y in loader:  # sampler.set_epoch(epoch) is missing before this loop
            x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)
            loss = F.cross_entropy(model(x), y)
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
            step += 1
            if step >= args.steps:
                break
        epoch += 1
        if dist.get_rank() == 0:
            print(f"epoch {epoch} step {step}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
