"""DataLoader throughput of a user's dataset for a list of ``num_workers`` values.

The dataset is named as ``package.module:function`` (imported) or ``path/to/script.py[:name]``
(run with ``runpy``; ``name`` defaults to ``dataset``). The named object is either a Dataset or
a callable returning one. Batches are only iterated (nothing is sent to a GPU), so the figure is
the loader's ceiling: if training is slower than this, the loader is not the bottleneck.
Each worker setting is timed after a warm-up of a few batches (worker start-up is reported
separately); the timed batches are split into windows whose throughputs give the median and spread.
"""

from __future__ import annotations

import importlib
import runpy
import time
from pathlib import Path

from gpudoctor.bench.protocol import spread
from gpudoctor.errors import GpuDoctorUserError
from gpudoctor.records.bench import BenchResult

WARMUP_BATCHES = 3
WINDOWS = 5


def load_dataset(spec: str):
    """Resolve ``module:function`` or ``script.py[:name]`` to a Dataset.

    Raises:
        GpuDoctorUserError: the module, file or name does not exist, with the accepted forms.
    """
    forms = "use package.module:function or path/to/script.py[:name] (name defaults to 'dataset')"
    target, _, name = spec.partition(":")
    if target.endswith(".py"):
        path = Path(target)
        if not path.is_file():
            raise GpuDoctorUserError(f"dataset script {target!r} does not exist; {forms}")
        namespace = runpy.run_path(str(path), run_name="gpudoctor_bench_dataset")
        name = name or "dataset"
    else:
        if not name:
            raise GpuDoctorUserError(f"dataset {spec!r} names no function; {forms}")
        try:
            namespace = vars(importlib.import_module(target))
        except ImportError as exc:
            raise GpuDoctorUserError(f"cannot import {target!r} ({exc}); {forms}") from None
    if name not in namespace:
        raise GpuDoctorUserError(f"{target!r} defines no {name!r}; {forms}")
    obj = namespace[name]
    if callable(obj) and not hasattr(obj, "__getitem__") and not hasattr(obj, "__iter__"):
        try:
            obj = obj()
        except TypeError as exc:
            raise GpuDoctorUserError(
                f"calling {spec}() failed ({exc}): it must take no arguments and return a Dataset; {forms}"
            ) from None
    if not hasattr(obj, "__getitem__") and not hasattr(obj, "__iter__"):
        raise GpuDoctorUserError(f"{spec!r} gave a {type(obj).__name__}, not a Dataset; {forms}")
    return obj


def _batch_count(dataset, batch_size: int, batches: int) -> int:
    try:
        available = len(dataset) // batch_size
    except TypeError:  # an IterableDataset without __len__
        return batches
    return min(batches, available)


def run_loader(
    dataset,
    *,
    workers: tuple[int, ...] = (0, 2, 4),
    batch_size: int = 64,
    batches: int = 50,
    pin_memory: bool = False,
) -> list[BenchResult]:
    """Samples per second of ``DataLoader(dataset, batch_size, num_workers=w)`` for each ``w``."""
    from torch.utils.data import DataLoader

    if batch_size < 1:
        raise GpuDoctorUserError(f"--batch-size {batch_size} must be at least 1")
    if any(w < 0 for w in workers):
        raise GpuDoctorUserError(f"--workers {workers} must be 0 or more each")
    total = _batch_count(dataset, batch_size, batches)
    if total < WARMUP_BATCHES + WINDOWS:
        raise GpuDoctorUserError(
            f"the dataset gives only {total} batches of {batch_size}; need {WARMUP_BATCHES + WINDOWS}: "
            "lower --batch-size or use a larger dataset"
        )
    per_window = (total - WARMUP_BATCHES) // WINDOWS
    results = []
    for w in workers:
        loader = DataLoader(
            dataset, batch_size=batch_size, num_workers=w, pin_memory=pin_memory, drop_last=True,
            persistent_workers=False,
        )
        start = time.perf_counter()
        it = iter(loader)
        next(it)
        first_ms = (time.perf_counter() - start) * 1000.0
        for _ in range(WARMUP_BATCHES - 1):
            next(it)
        rates = []
        for _ in range(WINDOWS):
            t0 = time.perf_counter()
            for _ in range(per_window):
                next(it)
            rates.append(per_window * batch_size / (time.perf_counter() - t0))
        del it, loader  # shuts the workers down
        stats = spread(rates)
        results.append(
            BenchResult(
                section="loader",
                op="loader",
                size=f"workers={w}",
                device="cpu",
                unit="samples/s",
                median=stats.median,
                p10=stats.p10,
                p90=stats.p90,
                repeats=stats.count,
                time_ms=batch_size / stats.median * 1000.0,  # per batch
                note=(
                    f"batch {batch_size}, {per_window} batches per window, pin_memory={pin_memory}; "
                    f"first batch after {first_ms:.0f} ms (worker start-up)"
                ),
            )
        )
    return results
