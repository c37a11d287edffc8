"""uint8 collate vs the default collate, on this machine's CPU.

The dataset holds uint8 HWC images (what a decoded JPEG or a PIL image gives). Three pipelines
build batches through a ``DataLoader`` (``num_workers`` as given; 0 times the work in the main
process):

* ``default``: per sample ``ToTensor`` (HWC uint8 -> CHW float32 / 255) and ``Normalize``, then
  PyTorch's default collate: what most scripts do;
* ``uint8``: :func:`gpudoctor.train.uint8_collate` (stacks the bytes; conversion left to the GPU);
* ``uint8+normalize_cpu``: the same, then :func:`normalize_on_device` on the CPU, to show what
  the conversion itself costs when it is batched (on a GPU it runs there instead).

Reports images/s (median of ``--repeats`` passes over the dataset) and bytes per batch.

    PYTHONPATH=src python benchmarks/collate_uint8.py --out benchmarks/results/collate_uint8-cpu.json
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import time

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset

from gpudoctor.train import normalize_on_device, uint8_collate
from gpudoctor.train.collate import IMAGENET_MEAN, IMAGENET_STD


class Images(Dataset):
    def __init__(self, n: int, size: int, transform: bool) -> None:
        rng = np.random.default_rng(0)
        self.images = rng.integers(0, 256, (n, size, size, 3), dtype=np.uint8)
        self.transform = transform
        self.mean = torch.tensor(IMAGENET_MEAN).view(3, 1, 1)
        self.std = torch.tensor(IMAGENET_STD).view(3, 1, 1)

    def __len__(self) -> int:
        return len(self.images)

    def __getitem__(self, i: int):
        image = self.images[i]
        if self.transform:  # ToTensor + Normalize, per sample
            t = torch.from_numpy(image).permute(2, 0, 1).float().div(255)
            return (t - self.mean) / self.std, i % 1000
        return image, i % 1000


def run(name: str, loader: DataLoader, repeats: int, normalize: bool) -> dict:
    rates, nbytes = [], 0
    for _ in range(repeats):
        t0, n = time.perf_counter(), 0
        for x, _ in loader:
            nbytes = x.numel() * x.element_size()  # what crossed the loader (and would cross PCIe)
            if normalize:
                x = normalize_on_device(x)
            n += len(x)
        rates.append(n / (time.perf_counter() - t0))
    return {"pipeline": name, "images_per_s": round(statistics.median(rates), 1),
            "runs": [round(r, 1) for r in rates], "batch_bytes_through_the_loader": nbytes}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--images", type=int, default=512)
    p.add_argument("--size", type=int, default=224)
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--workers", type=int, default=0)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--out", default="")
    a = p.parse_args()
    torch.set_num_threads(1)
    kw = {"batch_size": a.batch, "num_workers": a.workers, "drop_last": True}
    results = [
        run("default", DataLoader(Images(a.images, a.size, True), **kw), a.repeats, False),
        run("uint8", DataLoader(Images(a.images, a.size, False), collate_fn=lambda b: uint8_collate(b, hwc=True),
                                **kw), a.repeats, False),
        run("uint8+normalize_cpu", DataLoader(Images(a.images, a.size, False),
                                              collate_fn=lambda b: uint8_collate(b, hwc=True), **kw),
            a.repeats, True),
    ]
    base = results[0]["images_per_s"]
    for r in results:
        r["speedup_vs_default"] = round(r["images_per_s"] / base, 2)
    report = {"what": "uint8 collate vs default collate (ToTensor+Normalize per sample), CPU only",
              "command": "PYTHONPATH=src python benchmarks/collate_uint8.py " + " ".join(
                  f"--{k} {v}" for k, v in vars(a).items() if k != "out"),
              "torch": torch.__version__, "cpu": platform.processor() or platform.machine(),
              "cpus_available": len(os.sched_getaffinity(0)), "torch_threads": 1, "results": results}
    text = json.dumps(report, indent=2)
    print(text)
    if a.out:
        with open(a.out, "x", encoding="utf-8") as f:  # never overwrite an earlier result
            f.write(text + "\n")


if __name__ == "__main__":
    main()
