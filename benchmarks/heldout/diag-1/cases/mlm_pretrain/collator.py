"""Whole-word-masking collator for a WordPiece-style vocabulary."""
import random

import torch


class WholeWordMaskCollator:
    def __init__(self, vocab_size, mask_token_id=4, special_ids=(0, 1, 2, 3, 4), mlm_probability=0.15,
                 seed=0):
        self.vocab_size = vocab_size
        self.mask_token_id = mask_token_id
        self.special = set(special_ids)
        self.p = mlm_probability
        self.rng = random.Random(seed)

    def is_continuation(self, tok):
        # ids with the "##" prefix live in the upper quarter of the vocabulary
        return tok >= 3 * self.vocab_size // 4

    def _word_spans(self, ids):
        spans = []
        for i, tok in enumerate(ids):
            if tok in self.special:
                continue
            if spans and self.is_continuation(tok) and spans[-1][1] == i:
                spans[-1][1] = i + 1
            else:
                spans.append([i, i + 1])
        return spans

    def _mask_one(self, ids):
        ids = list(ids)
        labels = [-100] * len(ids)
        spans = self._word_spans(ids)
        n_mask = max(1, round(len(ids) * self.p))
        self.rng.shuffle(spans)
        covered = 0
        for s, e in spans:
            if covered >= n_mask:
                break
            for i in range(s, e):
                labels[i] = ids[i]
                r = self.rng.random()
                if r < 0.8:
                    ids[i] = self.mask_token_id
                elif r < 0.9:
                    ids[i] = self.rng.randrange(5, self.vocab_size)
            covered += e - s
        return ids, labels

    def __call__(self, examples):
        input_ids, labels = zip(*(self._mask_one(ex["input_ids"]) for ex in examples))
        input_ids = torch.tensor(input_ids, dtype=torch.long)
        return {
            "input_ids": input_ids,
            "attention_mask": torch.ones_like(input_ids),
            "labels": torch.tensor(labels, dtype=torch.long),
        }
