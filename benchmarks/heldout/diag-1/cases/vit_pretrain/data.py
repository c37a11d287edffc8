import torch


class DeviceSyntheticImages:
    """Random normalised images and labels, generated directly on the device."""

    def __init__(self, cfg, device, n_batches=4):
        g = torch.Generator(device=device).manual_seed(cfg.seed)
        shape = (cfg.batch_size, 3, cfg.image_size, cfg.image_size)
        self.batches = [(torch.randn(shape, device=device, generator=g),
                         torch.randint(0, cfg.num_classes, (cfg.batch_size,), device=device, generator=g))
                        for _ in range(n_batches)]

    def __iter__(self):
        while True:
            yield from self.batches
