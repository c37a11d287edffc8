"""In-memory tile cache for the multispectral land-cover classifier.

Tiles are synthesised here (the real project decodes GeoTIFF shards once and
keeps them resident); the cache is kept in page-locked memory so batches can be
copied to the device asynchronously.
"""
import os

import torch

# per-band statistics from the training split (12 Sentinel-2 bands)
BAND_MEAN = [0.341, 0.362, 0.383, 0.401, 0.432, 0.455, 0.467, 0.478, 0.489, 0.402, 0.371, 0.338]
BAND_STD = [0.121, 0.118, 0.117, 0.124, 0.131, 0.129, 0.133, 0.135, 0.137, 0.125, 0.119, 0.116]


def _synth_tiles(n, bands, size, num_classes, seed):
    g = torch.Generator().manual_seed(seed)
    raw = torch.randint(0, 256, (n, bands, size, size), dtype=torch.uint8, generator=g)
    labels = torch.randint(0, num_classes, (n,), generator=g)
    return raw, labels


class TileCache:
    """Holds every tile of the split and hands out contiguous batches.

    By default tiles are normalised once at load time. With ``keep_raw=True``
    the decoded uint8 values are kept and :meth:`normalize` must be applied to
    each batch.
    """

    def __init__(self, n_tiles, bands, size, num_classes, batch_size, seed=0, keep_raw=False):
        raw, labels = _synth_tiles(n_tiles, bands, size, num_classes, seed)
        self.mean = torch.tensor(BAND_MEAN[:bands]).view(1, -1, 1, 1)
        self.std = torch.tensor(BAND_STD[:bands]).view(1, -1, 1, 1)
        if keep_raw:
            tiles = raw
        else:
            tiles = self.normalize(raw)
            del raw
        if torch.cuda.is_available():
            tiles = tiles.pin_memory()
            labels = labels.pin_memory()
        self.tiles = tiles
        self.labels = labels
        self.batch_size = batch_size
        self.n_batches = n_tiles // batch_size
        self._g = torch.Generator().manual_seed(seed + 1)

    def normalize(self, x):
        if self.mean.device != x.device:
            self.mean = self.mean.to(x.device)
            self.std = self.std.to(x.device)
        return x.float().div_(255.0).sub_(self.mean).div_(self.std)

    def __len__(self):
        return self.n_batches

    def __iter__(self):
        order = torch.randperm(self.n_batches, generator=self._g).tolist()
        for b in order:
            s = b * self.batch_size
            yield self.tiles[s:s + self.batch_size], self.labels[s:s + self.batch_size]

    def to_device(self, batch, device):
        x, y = batch
        x = x.to(device, non_blocking=True)
        y = y.to(device, non_blocking=True)
        return x, y


def default_sizes():
    if os.environ.get("SMOKE") == "1":
        return dict(n_tiles=16, bands=12, size=32, batch_size=8)
    return dict(n_tiles=2048, bands=12, size=128, batch_size=1024)
