import argparse
import os
import random
import time

import torch
import torch.nn as nn

from utils import RunningMean, collate_mlm, masked_lm_loss, sample_documents, to_device

SMOKE = os.environ.get("SMOKE") == "1"
VOCAB = 512 if SMOKE else 8192
D_MODEL, N_LAYERS, N_HEADS = (32, 1, 2) if SMOKE else (1024, 6, 16)
BATCH, MAX_LEN = (4, 16) if SMOKE else (64, 256)


def build_model():
    layer = nn.TransformerEncoderLayer(D_MODEL, N_HEADS, 4 * D_MODEL, dropout=0.0,
                                       activation="gelu", batch_first=True, norm_first=True)
    return nn.ModuleDict({
        "embed": nn.Embedding(VOCAB, D_MODEL),
        "pos": nn.Embedding(MAX_LEN, D_MODEL),
        "encoder": nn.TransformerEncoder(layer, N_LAYERS, enable_nested_tensor=False),
        "norm": nn.LayerNorm(D_MODEL),
        "lm_head": nn.Linear(D_MODEL, VOCAB),
    })


def forward(model, input_ids, attention_mask):
    pos = torch.arange(input_ids.shape[1], device=input_ids.device)
    h = model["embed"](input_ids) + model["pos"](pos)
    h = model["encoder"](h, src_key_padding_mask=~attention_mask)
    return model["lm_head"](model["norm"](h))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--log-every", type=int, default=50)
    args = ap.parse_args()
    torch.manual_seed(0)
    rng = random.Random(0)
    device = "cuda" if torch.cuda.is_available() else "cpu"

    model = build_model().to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=5e-4, weight_decay=0.01, fused=(device == "cuda"))
    meter = RunningMean()
    t0 = time.time()
    for step in range(1, args.steps + 1):
        docs = sample_documents(rng, BATCH, MAX_LEN // 2, MAX_LEN + 32, VOCAB)
        batch = to_device(collate_mlm(docs, MAX_LEN, VOCAB, rng), device)
        with torch.autocast(device_type=device, dtype=torch.bfloat16):
            logits = forward(model, batch["input_ids"], batch["attention_mask"])
        loss = masked_lm_loss(logits, batch["labels"])
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        meter.update(loss.detach())
        if step % args.log_every == 0 or step == 1:
            print(f"step {step:5d} mlm_loss {meter.pop():.4f} ({time.time() - t0:.1f}s)", flush=True)


if __name__ == "__main__":
    main()
