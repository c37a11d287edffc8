"""A fast collate for uint8 images: keep bytes on the host, convert and normalise on the GPU.

The usual pipeline converts every image to float32 in the worker (``ToTensor`` + ``Normalize``),
so each batch crosses the worker pipe, the pinned buffer and PCIe at 4 bytes per pixel, and the
per-sample conversion runs in Python on the CPU. :func:`uint8_collate` stacks the images as they
are (uint8, ``N x C x H x W``): a quarter of the bytes, one copy per image. After the H2D copy,
:func:`normalize_on_device` does the conversion for the whole batch in two GPU kernels. The
benchmark ``benchmarks/collate_uint8.py`` compares it with the default collate on a CPU
(``benchmarks/results/collate_uint8-cpu.json``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)


def _chw(image: Any, channels_last_input: bool) -> torch.Tensor:
    if isinstance(image, torch.Tensor):
        t = image
    else:  # a PIL image or a numpy array: HWC (or HW) uint8
        array = np.asarray(image, dtype=np.uint8)
        t = torch.from_numpy(array if array.ndim == 3 else array[:, :, None])
        channels_last_input = True
    if t.dtype != torch.uint8:
        raise TypeError(f"uint8_collate: an image is {t.dtype}, not uint8; leave ToTensor/Normalize out of "
                        "the dataset (they make float32) and call normalize_on_device after the copy")
    if t.dim() == 2:
        t = t.unsqueeze(0)
    return t.permute(2, 0, 1) if channels_last_input else t


def uint8_collate(batch: Sequence[tuple[Any, Any]], *, hwc: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """``[(image, label), ...]`` -> ``(uint8 N x C x H x W, int64 labels)``.

    Images may be uint8 tensors (``C x H x W``, or ``H x W x C`` with ``hwc=True``), numpy arrays
    or PIL images (both ``H x W x C``). All images of a batch must have one size (crop in the
    dataset). Use as ``fast_loader(..., collate_fn=uint8_collate)``.
    """
    if not batch:
        raise ValueError("uint8_collate: empty batch")
    first = _chw(batch[0][0], hwc)
    out = torch.empty((len(batch), *first.shape), dtype=torch.uint8)
    labels = torch.empty(len(batch), dtype=torch.int64)
    for i, (image, label) in enumerate(batch):
        chw = first if i == 0 else _chw(image, hwc)
        if chw.shape != first.shape:
            raise ValueError(f"uint8_collate: image {i} is {tuple(chw.shape)}, the first {tuple(first.shape)}; "
                             "crop or resize to one size in the dataset")
        out[i].copy_(chw)
        labels[i] = int(label)
    return out, labels


def normalize_on_device(images: torch.Tensor, mean: Sequence[float] = IMAGENET_MEAN,
                        std: Sequence[float] = IMAGENET_STD, *, dtype: torch.dtype = torch.float32,
                        channels_last: bool = False) -> torch.Tensor:
    """uint8 ``N x C x H x W`` on the device -> ``dtype``, scaled to 0..1 and normalised per channel
    (``mean``/``std`` in 0..1 units, as torchvision's ``Normalize`` takes them)."""
    if images.dtype != torch.uint8:
        raise TypeError(f"normalize_on_device expects uint8 images, got {images.dtype}")
    scale = torch.tensor([255.0 * s for s in std], device=images.device, dtype=torch.float32).view(1, -1, 1, 1)
    shift = torch.tensor([255.0 * m for m in mean], device=images.device, dtype=torch.float32).view(1, -1, 1, 1)
    fmt = torch.channels_last if channels_last else torch.contiguous_format
    x = images.to(dtype=torch.float32, memory_format=fmt).sub_(shift).div_(scale)
    return x if dtype == torch.float32 else x.to(dtype)
