#!/usr/bin/env python
"""Causal LM on length-bucketed batches (token budget per batch is fixed)."""
import argparse
import math
import os
import random
import time

import torch
from torch import nn
import torch.nn.functional as F


def parse_args():
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=300)
    p.add_argument("--tokens-per-batch", type=int, default=32768)
    p.add_argument("--buckets", type=str, default="256,384,512,768")
    p.add_argument("--vocab", type=int, default=16384)
    p.add_argument("--dim", type=int, default=768)
    p.add_argument("--layers", type=int, default=3)
    p.add_argument("--heads", type=int, default=12)
    p.add_argument("--lr", type=float, default=6e-4)
    p.add_argument("--warmup", type=int, default=100)
    p.add_argument("--no-compile", action="store_true")
    p.add_argument("--compile-dynamic", action="store_true",
                   help="compile with symbolic sequence lengths")
    p.add_argument("--log-every", type=int, default=50)
    p.add_argument("--seed", type=int, default=1234)
    args = p.parse_args()
    if os.environ.get("SMOKE") == "1":
        args.tokens_per_batch, args.buckets = 256, "16,32,64"
        args.vocab, args.dim, args.layers, args.heads = 128, 32, 1, 2
    return args


class RMSNorm(nn.Module):
    def __init__(self, d, eps=1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(d))

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


class Layer(nn.Module):
    def __init__(self, d, h):
        super().__init__()
        self.h = h
        self.n1, self.n2 = RMSNorm(d), RMSNorm(d)
        self.wqkv = nn.Linear(d, 3 * d, bias=False)
        self.wo = nn.Linear(d, d, bias=False)
        self.w12 = nn.Linear(d, 2 * 4 * d, bias=False)
        self.w3 = nn.Linear(4 * d, d, bias=False)

    def forward(self, x):
        B, T, D = x.shape
        qkv = self.wqkv(self.n1(x)).view(B, T, 3, self.h, D // self.h).permute(2, 0, 3, 1, 4)
        a = F.scaled_dot_product_attention(qkv[0], qkv[1], qkv[2], is_causal=True)
        x = x + self.wo(a.transpose(1, 2).reshape(B, T, D))
        u, g = self.w12(self.n2(x)).chunk(2, dim=-1)
        return x + self.w3(F.silu(g) * u)


class LM(nn.Module):
    def __init__(self, vocab, d, n_layers, h, max_len=2048):
        super().__init__()
        self.emb = nn.Embedding(vocab, d)
        self.pos = nn.Parameter(torch.zeros(max_len, d))
        self.layers = nn.ModuleList(Layer(d, h) for _ in range(n_layers))
        self.norm = RMSNorm(d)
        self.out = nn.Linear(d, vocab, bias=False)
        self.out.weight = self.emb.weight
        nn.init.normal_(self.pos, std=0.02)
        nn.init.normal_(self.emb.weight, std=0.02)

    def forward(self, tokens, labels):
        T = tokens.shape[1]
        x = self.emb(tokens) + self.pos[:T]
        for layer in self.layers:
            x = layer(x)
        logits = self.out(self.norm(x))
        return F.cross_entropy(logits.flatten(0, 1).float(), labels.flatten())


def bucketed_batches(buckets, tokens_per_batch, vocab, device, seed):
    rng = random.Random(seed)
    g = torch.Generator(device=device).manual_seed(seed)
    while True:
        L = rng.choice(buckets)
        bsz = tokens_per_batch // L
        seq = torch.randint(0, vocab, (bsz, L + 1), device=device, generator=g)
        yield seq[:, :-1], seq[:, 1:]


def lr_at(step, args):
    if step < args.warmup:
        return args.lr * (step + 1) / args.warmup
    return args.lr * 0.5 * (1 + math.cos(math.pi * min(1.0, step / max(1, args.steps))))


def main():
    args = parse_args()
    torch.manual_seed(args.seed)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    buckets = [int(b) for b in args.buckets.split(",")]

    model = LM(args.vocab, args.dim, args.layers, args.heads).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.1,
                            betas=(0.9, 0.95), fused=device == "cuda")
    step_fn = model if args.no_compile else torch.compile(model, dynamic=args.compile_dynamic)

    batches = bucketed_batches(buckets, args.tokens_per_batch, args.vocab, device, args.seed)
    t0 = time.perf_counter()
    for step in range(args.steps):
        for g in opt.param_groups:
            g["lr"] = lr_at(step, args)
        tokens, labels = next(batches)
        with torch.autocast(device, dtype=torch.bfloat16, enabled=device == "cuda"):
            loss = step_fn(tokens, labels)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        if step % args.log_every == 0:
            print(f"step {step} len {tokens.shape[1]} loss {loss.item():.3f} "
                  f"t {time.perf_counter() - t0:.1f}s", flush=True)
    print("done")


if __name__ == "__main__":
    main()
