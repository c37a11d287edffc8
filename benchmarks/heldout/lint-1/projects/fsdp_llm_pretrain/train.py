"""torchrun --nproc_per_node=8 train.py --data /data/tokens.bin"""
import argparse
import functools
import os
import time

import numpy as np
import torch
import torch.distributed as dist
from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
from torch.distributed.fsdp import MixedPrecision, ShardingStrategy
from torch.distributed.fsdp.wrap import transformer_auto_wrap_policy

from ckpt import load_checkpoint, save_checkpoint
from model import GPT, Block


class TokenStream:
    def __init__(self, path, ctx, batch, rank, world):
        self.data = np.memmap(path, dtype=np.uint16, mode="r")
        self.ctx, self.batch = ctx, batch
        self.rng = np.random.default_rng(1234 + rank)

    def next(self, device):
        ix = self.rng.integers(0, len(self.data) - self.ctx - 1, size=self.batch)
        x = np.stack([self.data[i:i + self.ctx] for i in ix]).astype(np.int64)
        y = np.stack([self.data[i + 1:i + 1 + self.ctx] for i in ix]).astype(np.int64)
        x, y = torch.from_numpy(x).pin_memory(), torch.from_numpy(y).pin_memory()
        return x.to(device, non_blocking=True), y.to(device, non_blocking=True)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--data", required=True)
    p.add_argument("--steps", type=int, default=100_000)
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--ctx", type=int, default=2048)
    p.add_argument("--lr", type=float, default=3e-4)
    p.add_argument("--max-norm", type=float, default=1.0)
    p.add_argument("--resume", default=None)
    p.add_argument("--out", default="ckpt")
    p.add_argument("--log-interval", type=int, default=20)
    args = p.parse_args()

    dist.init_process_group("nccl")
    rank, world = dist.get_rank(), dist.get_world_size()
    local_rank = int(os.environ["LOCAL_RANK"])
    torch.cuda.set_device(local_rank)
    device = torch.device("cuda", local_rank)

    wrap = functools.partial(transformer_auto_wrap_policy, transformer_layer_cls={Block})
    bf16 = MixedPrecision(param_dtype=torch.bfloat16, reduce_dtype=torch.bfloat16,
                          buffer_dtype=torch.bfloat16)
    model = FSDP(GPT(ctx=args.ctx), auto_wrap_policy=wrap, mixed_precision=bf16,
                 sharding_strategy=ShardingStrategy.FULL_SHARD, device_id=local_rank)
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr, betas=(0.9, 0.95), weight_decay=0.1)

    start = load_checkpoint(model, args.resume) if args.resume else 0
    stream = TokenStream(args.data, args.ctx, args.batch, rank, world)
    model.train()
    t0 = time.time()
    for step in range(start, args.steps):
        x, y = stream.next(device)
        loss = model(x, y)
        loss.backward()
        gnorm = torch.nn.utils.clip_grad_norm_(model.parameters(), args.max_norm)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

        if step % args.log_interval == 0:
            stats = torch.stack([loss.detach().float(), gnorm.float()])
            dist.all_reduce(stats, op=dist.ReduceOp.AVG)
            if rank == 0:
                dt = (time.time() - t0) / args.log_interval
                print(f"step {step} loss {stats[0].item():.4f} gnorm {stats[1].item():.3f} {dt:.2f}s/it")
                t0 = time.time()
        if step > 0 and step % 2000 == 0:
            save_checkpoint(model, step, args.out)

    dist.destroy_process_group()


if __name__ == "__main__":
    main()
