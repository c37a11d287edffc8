"""GPT pretraining on a synthetic token stream, driven by the event engine."""
import argparse
import os

import torch

from engine import Engine, Events
from gpt import GPT
from handlers import Checkpoint, ProgressPrinter


def token_stream(vocab, batch, block, device, seed=0):
    g = torch.Generator(device=device).manual_seed(seed)
    corpus = torch.randint(0, vocab, (64 * batch * block,), device=device, generator=g)
    while True:
        ix = torch.randint(0, corpus.numel() - block - 1, (batch,), device=device, generator=g)
        offs = ix[:, None] + torch.arange(block + 1, device=device)
        chunk = corpus[offs]
        yield chunk[:, :-1], chunk[:, 1:]


def build(args, device):
    model = GPT(args.vocab, args.d_model, args.n_layer, args.n_head, args.block).to(device)
    decay = [p for n, p in model.named_parameters() if p.dim() >= 2]
    no_decay = [p for n, p in model.named_parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1},
                             {"params": no_decay, "weight_decay": 0.0}],
                            lr=args.lr, betas=(0.9, 0.95), fused=device == "cuda")
    return model, opt


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=300)
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--block", type=int, default=1024)
    p.add_argument("--vocab", type=int, default=32000)
    p.add_argument("--d-model", type=int, default=1024)
    p.add_argument("--n-layer", type=int, default=12)
    p.add_argument("--n-head", type=int, default=16)
    p.add_argument("--lr", type=float, default=3e-4)
    p.add_argument("--out", default=os.environ.get("RUN_DIR", "runs/gpt_engine"))
    p.add_argument("--save-every", type=int, default=25)
    args = p.parse_args()
    if os.environ.get("SMOKE") == "1":
        args.batch, args.block, args.vocab, args.d_model, args.n_layer, args.n_head = 2, 32, 256, 64, 2, 4

    torch.manual_seed(0)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    model, opt = build(args, device)
    amp = dict(device_type=device, dtype=torch.bfloat16, enabled=device == "cuda")

    def train_step(engine, batch):
        x, y = batch
        with torch.autocast(**amp):
            loss = model(x, y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        return loss.detach()

    trainer = Engine(train_step)
    trainer.add_event_handler(Events.ITERATION_COMPLETED, ProgressPrinter(), every=50)
    ckpt = Checkpoint({"model": model, "optimizer": opt}, os.path.join(args.out, "checkpoints"))
    trainer.add_event_handler(Events.ITERATION_COMPLETED, ckpt, every=args.save_every)

    trainer.run(token_stream(args.vocab, args.batch, args.block, device), max_iters=args.steps)
    if device == "cuda":
        torch.cuda.synchronize()
    print("finished", trainer.state.iteration, "iterations")


if __name__ == "__main__":
    main()
