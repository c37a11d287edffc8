"""Helpers for the MLM toy run: synthetic corpus, collation, metrics."""
import random

import torch
import torch.nn.functional as F

PAD, MASK, FIRST_REAL = 0, 1, 4


def sample_documents(rng, n_docs, min_len, max_len, vocab_size):
    """Stand-in for a tokenised corpus: variable-length python lists of ids."""
    docs = []
    for _ in range(n_docs):
        length = rng.randint(min_len, max_len)
        docs.append(rng.choices(range(FIRST_REAL, vocab_size), k=length))
    return docs


def word_starts(doc):
    """Toy word-piece convention: ids divisible by 5 begin a new word."""
    return [i for i, t in enumerate(doc) if i == 0 or t % 5 == 0]


def collate_mlm(docs, max_len, vocab_size, rng, mask_prob=0.15):
    """Pad/truncate, then whole-word 80/10/10 masking. Unmasked label positions are -100."""
    ids_rows, label_rows, attn_rows = [], [], []
    for d in docs:
        d = d[:max_len]
        starts = word_starts(d) + [len(d)]
        ids = list(d)
        labels = [-100] * len(d)
        for a, b in zip(starts[:-1], starts[1:]):
            if rng.random() >= mask_prob:
                continue
            r = rng.random()
            for j in range(a, b):
                labels[j] = d[j]
                if r < 0.8:
                    ids[j] = MASK
                elif r < 0.9:
                    ids[j] = rng.randrange(FIRST_REAL, vocab_size)
        pad = max_len - len(d)
        ids_rows.append(ids + [PAD] * pad)
        label_rows.append(labels + [-100] * pad)
        attn_rows.append([True] * len(d) + [False] * pad)
    return {
        "input_ids": torch.tensor(ids_rows, dtype=torch.long),
        "attention_mask": torch.tensor(attn_rows, dtype=torch.bool),
        "labels": torch.tensor(label_rows, dtype=torch.long),
    }


def to_device(batch, device):
    if device == "cuda":
        return {k: v.pin_memory().to(device, non_blocking=True) for k, v in batch.items()}
    return {k: v.to(device) for k, v in batch.items()}


def masked_lm_loss(logits, labels):
    """Cross-entropy over the masked positions only."""
    sel = labels != -100
    return F.cross_entropy(logits[sel].float(), labels[sel])


class RunningMean:
    def __init__(self):
        self.total, self.count = 0.0, 0

    def update(self, value):
        self.total += float(value)
        self.count += 1

    def pop(self):
        m = self.total / max(1, self.count)
        self.total, self.count = 0.0, 0
        return m
