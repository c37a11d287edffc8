import argparse
import os

import torch
from torch import nn
import torch.nn.functional as F

from datamodule import UtteranceBatches
from lit import LitModule, Trainer


class IntentClassifier(LitModule):
    def __init__(self, vocab=8000, d_model=512, n_layers=4, n_heads=8, num_intents=64, max_len=64, lr=3e-4):
        super().__init__()
        self.lr = lr
        self.embed = nn.Embedding(vocab, d_model, padding_idx=0)
        self.pos = nn.Parameter(torch.randn(max_len, d_model) * 0.02)
        layer = nn.TransformerEncoderLayer(d_model, n_heads, 4 * d_model, dropout=0.1,
                                           batch_first=True, norm_first=True, activation="gelu")
        self.encoder = nn.TransformerEncoder(layer, n_layers, enable_nested_tensor=False)
        self.norm = nn.LayerNorm(d_model)
        self.head = nn.Linear(d_model, num_intents)

    def encode(self, input_ids, attention_mask):
        x = self.embed(input_ids) + self.pos[: input_ids.shape[1]]
        return self.norm(self.encoder(x, src_key_padding_mask=~attention_mask))

    def pool(self, hidden, batch):
        # mean over the real tokens of each utterance
        return torch.stack([h[:n].mean(0) for h, n in zip(hidden, batch["lengths"])])

    def training_step(self, batch, batch_idx):
        hidden = self.encode(batch["input_ids"], batch["attention_mask"])
        logits = self.head(self.pool(hidden, batch))
        loss = F.cross_entropy(logits.float(), batch["labels"], label_smoothing=0.05)
        self.log("train_loss", loss.detach())
        return loss

    def configure_optimizers(self):
        return torch.optim.AdamW(self.parameters(), lr=self.lr, weight_decay=0.01)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=300)
    p.add_argument("--batch-size", type=int, default=1024)
    p.add_argument("--max-len", type=int, default=64)
    args = p.parse_args()
    small = os.environ.get("SMOKE") == "1"
    if small:
        args.batch_size, args.max_len = 8, 16

    torch.manual_seed(0)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    module = (IntentClassifier(vocab=500, d_model=32, n_layers=1, n_heads=2, max_len=args.max_len) if small
              else IntentClassifier(max_len=args.max_len))
    data = UtteranceBatches(8, args.batch_size, args.max_len, 500 if small else 8000, 64, device)
    Trainer(max_steps=args.steps).fit(module, data)
    print("done")


if __name__ == "__main__":
    main()
