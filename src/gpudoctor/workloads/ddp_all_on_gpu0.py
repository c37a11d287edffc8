"""DDP where every rank uses GPU 0: ``torch.cuda.set_device(local_rank)`` is missing.

``.cuda()`` and ``torch.device("cuda")`` mean the *current* device, which is GPU 0 in every
process unless the script sets it. With NCCL this usually stops at "Duplicate GPU detected"; with
gloo (the default here, ``--backend``) the job runs and all ranks silently share one GPU, which
is what gpudoctor must notice. Planted: ranks share a GPU. Run under torchrun.

    torchrun --standalone --nproc_per_node 2 -m gpudoctor.workloads.ddp_all_on_gpu0 [--size ...]
"""

from __future__ import annotations

import argparse

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP

SIZES = {
    "tiny": dict(batch=32, width=64),
    "small": dict(batch=1024, width=2048),
    "medium": dict(batch=2048, width=4096),
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", choices=SIZES, default="small")
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--backend", choices=("gloo", "nccl"), default="gloo")
    args = parser.parse_args()
    cfg = SIZES[args.size]
    dist.init_process_group(args.backend)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")  # cuda:0 on every rank
    torch.manual_seed(0)
    w = cfg["width"]
    model = DDP(nn.Sequential(nn.Linear(w, w), nn.ReLU(), nn.Linear(w, 10)).to(device))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    x = torch.randn(cfg["batch"], w, device=device)
    y = torch.randint(0, 10, (cfg["batch"],), device=device)

    for step in range(args.steps):
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        if (step + 1) % 20 == 0 and dist.get_rank() == 0:
            print(f"step {step + 1} loss {loss.item():.4f}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
