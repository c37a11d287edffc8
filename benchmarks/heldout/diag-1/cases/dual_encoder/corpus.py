"""Query/passage pairs with their metadata, held in memory as plain Python records."""
import random

SOURCES = ("web", "news", "forum", "wiki", "qa")


def load_pairs(n, q_len, d_len, vocab, seed=0):
    rng = random.Random(seed)
    records = []
    for i in range(n):
        cut = rng.randrange(1, d_len - 1)
        records.append({
            "pair_id": i,
            "query": [rng.randrange(5, vocab) for _ in range(q_len)],
            "passage": [rng.randrange(5, vocab) for _ in range(d_len)],
            "meta": {"source": SOURCES[i % len(SOURCES)], "spans": [[0, cut], [cut, d_len]],
                     "clicks": [rng.randrange(100) for _ in range(4)]},
        })
    return records


class PairBatcher:
    def __init__(self, records, batch_size, seed=0):
        self.records = records
        self.batch_size = batch_size
        self.rng = random.Random(seed)

    def __iter__(self):
        while True:
            picks = self.rng.sample(self.records, self.batch_size)
            yield [r["query"] for r in picks], [r["passage"] for r in picks]
