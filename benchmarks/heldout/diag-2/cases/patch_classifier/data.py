"""Synthetic image source that mimics a decoded-JPEG pipeline (uint8 HWC -> CHW)."""
import torch


def synth_uint8_batch(cfg, generator):
    imgs = torch.randint(0, 256, (cfg.batch_size, cfg.channels, cfg.image_size, cfg.image_size),
                         dtype=torch.uint8, generator=generator)
    labels = torch.randint(0, cfg.num_classes, (cfg.batch_size,), generator=generator)
    return imgs, labels


def to_tensor_normalize(imgs_u8, mean, std):
    """Same maths as torchvision ToTensor() + Normalize(mean, std)."""
    m = torch.tensor(mean, dtype=torch.float32).view(1, -1, 1, 1)
    s = torch.tensor(std, dtype=torch.float32).view(1, -1, 1, 1)
    return imgs_u8.float().div_(255.0).sub_(m).div_(s)


class HostBatchPool:
    """Keeps a handful of ready batches in page-locked memory and cycles over them."""

    def __init__(self, batches, pin=True):
        self.batches = []
        for x, y in batches:
            if pin and torch.cuda.is_available():
                x, y = x.pin_memory(), y.pin_memory()
            self.batches.append((x, y))
        self._i = 0

    def __iter__(self):
        return self

    def __next__(self):
        item = self.batches[self._i % len(self.batches)]
        self._i += 1
        return item
