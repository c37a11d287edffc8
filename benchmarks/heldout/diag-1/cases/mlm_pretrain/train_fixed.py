"""Masked-LM pretraining with whole-word masking."""
import argparse
import os
import random

import torch
from torch.utils.data import Dataset

from collator import WholeWordMaskCollator
from modeling import BertForMaskedLM
from trainer import ExponentialMovingAverage, Trainer, TrainingArguments


class PackedCorpus(Dataset):
    """Stand-in for a tokenised, packed corpus: fixed-length id sequences."""

    def __init__(self, n, seq_len, vocab_size, seed=0):
        rng = random.Random(seed)
        self.rows = [[2] + [rng.randrange(5, vocab_size) for _ in range(seq_len - 2)] + [3]
                     for _ in range(n)]

    def __len__(self):
        return len(self.rows)

    def __getitem__(self, i):
        return {"input_ids": self.rows[i]}


class MLMTrainer(Trainer):
    def __init__(self, *a, **kw):
        super().__init__(*a, **kw)
        self.loss_ema = ExponentialMovingAverage()

    def training_step(self, model, inputs):
        loss = super().training_step(model, inputs)
        self.loss_ema.update(loss)
        return loss

    def logs(self):
        return {"loss": float(self.loss_ema.value), "lr": self.lr_scheduler.get_last_lr()[0]}


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=300)
    cli = p.parse_args()

    smoke = os.environ.get("SMOKE") == "1"
    vocab, seq_len = (1000, 32) if smoke else (30522, 512)
    args = TrainingArguments(max_steps=cli.steps, per_device_train_batch_size=4 if smoke else 32)
    torch.manual_seed(args.seed)
    model = (BertForMaskedLM(vocab, hidden=64, layers=2, heads=4, ff=128, max_pos=seq_len) if smoke
             else BertForMaskedLM(vocab, max_pos=seq_len))
    dataset = PackedCorpus(64 if smoke else 2048, seq_len, vocab)
    trainer = MLMTrainer(model, args, dataset, WholeWordMaskCollator(vocab))
    trainer.train()


if __name__ == "__main__":
    main()
