import argparse
import os
import time

import torch
import torch.nn.functional as F

from accel import Accelerator
from model import TinyLM

SMOKE = os.environ.get("SMOKE") == "1"
VOCAB, D, LAYERS, HEADS = (256, 32, 1, 2) if SMOKE else (32000, 512, 6, 8)
BATCH, SEQ = (2, 16) if SMOKE else (48, 512)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--log-every", type=int, default=100)
    args = ap.parse_args()
    torch.manual_seed(0)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    acc = Accelerator(mixed_precision="bf16")

    model, opt = acc.prepare(TinyLM(VOCAB, D, LAYERS, HEADS, SEQ), torch.optim.AdamW,
                             lr=6e-4, betas=(0.9, 0.95), weight_decay=0.1)
    # synthetic token stream kept on the device; windows are sampled from it each step
    stream = torch.randint(0, VOCAB, (BATCH * SEQ * 64 + 1,), device=device)
    n_windows = (stream.numel() - 1) // SEQ
    offsets = torch.arange(SEQ, device=device)

    t0 = time.time()
    for step in range(1, args.steps + 1):
        starts = torch.randint(0, n_windows, (BATCH, 1), device=device) * SEQ
        idx = stream[starts + offsets]
        tgt = stream[starts + offsets + 1]
        with acc.autocast():
            logits = model(idx)
        loss = F.cross_entropy(logits.float().view(-1, VOCAB), tgt.view(-1))
        opt.zero_grad(set_to_none=True)
        acc.backward(loss)
        acc.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        if step % args.log_every == 0 or step == 1:
            acc.print(f"step {step:5d} loss {loss.item():.4f} ({time.time() - t0:.1f}s)")


if __name__ == "__main__":
    main()
