import random

import torch


class UtteranceBatches:
    """Pre-tokenised utterances, padded per batch; lengths travel with the batch."""

    def __init__(self, n_batches, batch_size, max_len, vocab, num_intents, device, seed=0):
        rng = random.Random(seed)
        g = torch.Generator(device=device).manual_seed(seed)
        self.batches = []
        for _ in range(n_batches):
            lengths = [rng.randint(max_len // 8, max_len) for _ in range(batch_size)]
            ids = torch.randint(1, vocab, (batch_size, max_len), device=device, generator=g)
            mask = torch.arange(max_len, device=device)[None, :] < torch.tensor(lengths, device=device)[:, None]
            self.batches.append({
                "input_ids": ids * mask,
                "attention_mask": mask,
                "lengths": lengths,
                "labels": torch.randint(0, num_intents, (batch_size,), device=device, generator=g),
            })

    def __iter__(self):
        return iter(self.batches)
