"""DDP where one rank (the last, unless ``--straggler-rank`` names another) does extra host work
every step (a sleep standing for per-rank logging, evaluation or a slow disk): the other ranks
wait for it in every all-reduce. Planted: straggler rank. Run under torchrun.

    torchrun --standalone --nproc_per_node 2 -m gpudoctor.workloads.straggler [--size ...]
    torchrun --standalone --nproc_per_node 8 -m gpudoctor.workloads.straggler --straggler-rank 5
"""

from __future__ import annotations

import argparse
import os
import time

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP

SIZES = {  # batch, width, depth, extra host time per step on the slow rank
    "tiny": dict(batch=32, width=64, depth=2, sleep_ms=20),
    "small": dict(batch=4096, width=4096, depth=6, sleep_ms=30),
    "medium": dict(batch=8192, width=4096, depth=8, sleep_ms=40),
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", choices=SIZES, default="small")
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--straggler-rank", type=int, default=-1,
                        help="the rank that sleeps every step (default -1: the last rank)")
    args = parser.parse_args()
    cfg = SIZES[args.size]
    cuda = torch.cuda.is_available()
    local_rank = int(os.environ.get("LOCAL_RANK", 0))
    if cuda:
        torch.cuda.set_device(local_rank)
    dist.init_process_group("nccl" if cuda else "gloo")
    device = torch.device("cuda", local_rank) if cuda else torch.device("cpu")
    rank, world = dist.get_rank(), dist.get_world_size()
    slow_rank = args.straggler_rank % world if args.straggler_rank < 0 else args.straggler_rank
    if not 0 <= slow_rank < world:
        parser.error(f"--straggler-rank {args.straggler_rank}: choose a rank from 0 to {world - 1} (or -1, the last)")
    torch.manual_seed(0)
    w = cfg["width"]
    layers: list[nn.Module] = []
    for _ in range(cfg["depth"]):
        layers += [nn.Linear(w, w), nn.GELU()]
    model = DDP(nn.Sequential(*layers, nn.Linear(w, 10)).to(device),
                device_ids=[local_rank] if cuda else None)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    amp_dtype = torch.bfloat16 if cuda else torch.float32
    x = torch.randn(cfg["batch"], w, device=device)
    y = torch.randint(0, 10, (cfg["batch"],), device=device)

    for step in range(args.steps):
        if rank == slow_rank:
            time.sleep(cfg["sleep_ms"] / 1000)  # the straggler's extra work
        with torch.autocast(device.type, dtype=amp_dtype, enabled=cuda):
            loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        if (step + 1) % 20 == 0 and rank == 0:
            print(f"step {step + 1} loss {loss.item():.4f}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
