import torch


class ClickLogPool:
    """A handful of pre-built synthetic click-log batches kept on the device."""

    def __init__(self, cfg, device, seed=0):
        g = torch.Generator(device=device).manual_seed(seed)
        card = torch.tensor(cfg.cardinalities, device=device)
        self.batches = []
        for _ in range(cfg.pool_batches):
            dense = torch.randn(cfg.batch_size, cfg.num_dense, device=device, generator=g)
            u = torch.rand(cfg.batch_size, len(cfg.cardinalities), device=device, generator=g)
            sparse = (u * card).long()
            label = (torch.rand(cfg.batch_size, device=device, generator=g) < 0.25).float()
            self.batches.append((dense, sparse, label))

    def __iter__(self):
        while True:
            yield from self.batches
