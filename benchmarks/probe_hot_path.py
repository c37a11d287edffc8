"""Host-side cost of the ``gpudoctor run`` probes, per patched call and per step boundary.

    PYTHONPATH=src python benchmarks/probe_hot_path.py [--json]

CPU-side only: it times the Python wrappers the probes put around ``Tensor.to``/``copy_``/
``.item()``, ``autograd.backward``, the DataLoader's ``__next__`` and the step boundary, against
the originals, in one process on whatever machine runs it. On a machine without CUDA the device
parts of the boundary (CUDA events, allocator statistics, lazy device reads) are not exercised;
the CUDA-side figures come from ``benchmarks/run_overhead.py`` on a GPU.

The online leak check of the boundary (:func:`~gpudoctor.collectors.instrument.leak_probe.watch`)
is also timed alone, on steady allocator counters (it is inside the CUDA boundary figure).

Each figure is the best of several repeats of a timed loop (the least disturbed by other
processes), in microseconds per call; ``overhead_us`` is patched minus original.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from collections.abc import Callable


def _best_us(fn: Callable[[], object], n: int, repeats: int) -> float:
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        for _ in range(n):
            fn()
        best = min(best, (time.perf_counter() - t0) / n)
    return best * 1e6


def _device_costs(torch, n: int, repeats: int) -> dict[str, float]:
    """Host-side microseconds of the CUDA calls a probed step makes (nothing here waits)."""
    from gpudoctor.collectors.instrument.lazy import LazyValues

    lazy = LazyValues()
    value = torch.tensor(1.0, device="cuda")
    pinned = torch.empty(1024, pin_memory=True)
    pageable = torch.empty(1024)
    event = torch.cuda.Event(enable_timing=True)

    def lazy_read() -> None:
        lazy.push(0, "loss", value)
        lazy.poll()

    costs = {
        "torch.cuda.memory_stats_as_nested_dict()": _best_us(torch.cuda.memory_stats_as_nested_dict, n, repeats),
        "torch.cuda.Event.record() (timing)": _best_us(event.record, n, repeats),
        "lazy loss read (D2H copy + event + poll)": _best_us(lazy_read, n, repeats),
        "Tensor.is_pinned() (pinned source)": _best_us(pinned.is_pinned, n, repeats),
        "Tensor.is_pinned() (pageable source)": _best_us(pageable.is_pinned, n, repeats),
    }
    torch.cuda.synchronize()  # sync point: the benchmark is over
    return costs


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=20000, help="calls per timed loop")
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()

    import torch
    from torch.utils.data import DataLoader, TensorDataset
    from torch.utils.data import dataloader as dl

    x = torch.randn(4)
    y = torch.empty(4)
    s = torch.tensor(1.0)
    calls: dict[str, tuple[str, Callable[[Callable], Callable[[], object]]]] = {
        "Tensor.to (float32 -> bfloat16)": ("to", lambda f: (lambda: f(x, torch.bfloat16))),
        "Tensor.to (no-op, same dtype)": ("to", lambda f: (lambda: f(x, torch.float32))),
        "Tensor.copy_": ("copy_", lambda f: (lambda: f(y, x))),
        "Tensor.item": ("item", lambda f: (lambda: f(s))),
    }
    cuda = torch.cuda.is_available()
    if cuda:  # the casts a GPU step mostly makes: on tensors already on the device
        xc = torch.randn(4, device="cuda")
        calls["Tensor.to (cuda float32 -> bfloat16)"] = ("to", lambda f: (lambda: f(xc, torch.bfloat16)))
    originals = {name: getattr(torch.Tensor, attr) for name, (attr, _) in calls.items()}
    orig_next = dl._BaseDataLoaderIter.__next__
    loader = DataLoader(TensorDataset(torch.randn(64, 2), torch.randn(64, 1)), batch_size=1)

    def next_once() -> float:
        it = iter(loader)
        t0 = time.perf_counter()
        for _ in range(64):
            next(it)
        return (time.perf_counter() - t0) / 64 * 1e6

    with tempfile.TemporaryDirectory() as tmp:
        os.environ["GPUDOCTOR_RUN_DIR"] = tmp
        os.environ.pop("GPUDOCTOR_STEPS", None)
        os.environ.pop("GPUDOCTOR_PROFILE", None)
        from gpudoctor.collectors.instrument import probes
        from gpudoctor.collectors.instrument.state import S

        probes.install()
        patched = {name: getattr(torch.Tensor, attr) for name, (attr, _) in calls.items()}
        patched_next = dl._BaseDataLoaderIter.__next__
        # Original and patched alternate, repeat after repeat, and each keeps its best: the
        # machine's load drifts, and both sides should see the same drift.
        before = dict.fromkeys(calls, float("inf"))
        after = dict.fromkeys(calls, float("inf"))
        loader_name = "DataLoader.__next__ (batch 1, no workers)"
        before[loader_name] = after[loader_name] = float("inf")
        for _ in range(args.repeats):
            for name, (_, call) in calls.items():
                before[name] = min(before[name], _best_us(call(originals[name]), args.n, 1))
                after[name] = min(after[name], _best_us(call(patched[name]), args.n, 1))
            dl._BaseDataLoaderIter.__next__ = orig_next
            before[loader_name] = min(before[loader_name], next_once())
            dl._BaseDataLoaderIter.__next__ = patched_next
            after[loader_name] = min(after[loader_name], next_once())

        device = _device_costs(torch, args.n // 10, args.repeats) if cuda else None
        loss = torch.tensor(0.5, device="cuda" if cuda else "cpu")

        def one_boundary() -> None:
            S.last_loss = loss
            probes.boundary(skipped=None)

        n_steps = max(args.n // 20, 200)
        boundary_us = _best_us(one_boundary, n_steps, args.repeats)
        # the online leak check the boundary makes (armed by install: plain run, no memory mode),
        # on steady allocator counters, minus the cost of calling an empty lambda the same way
        from gpudoctor.collectors.instrument import leak_probe

        fields = {"mem": {"allocated_bytes": 1 << 30}}
        watch_us = (_best_us(lambda: leak_probe.watch(10, fields.get("mem")), args.n, args.repeats)
                    - _best_us(lambda: fields.get("mem"), args.n, args.repeats))
        S.finished = True  # the atexit hook would write the run: nothing to keep here
        if S.writer is not None:
            S.writer.close()

    rows = {
        name: {"original_us": before[name], "patched_us": after[name], "overhead_us": after[name] - before[name]}
        for name in before
    }
    result = {
        "what": "host-side cost of the gpudoctor run probes (CUDA parts only where a GPU is present)",
        "torch": torch.__version__,
        "python": sys.version.split()[0],
        "cuda_available": torch.cuda.is_available(),
        "calls": rows,
        "step_boundary_us": boundary_us,
        "step_boundary_includes_cuda": cuda,
        "leak_watch_us": watch_us,
        "cuda_calls_us": device,
    }
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        for name, row in rows.items():
            print(f"{name:45s} {row['original_us']:7.2f} -> {row['patched_us']:7.2f} us  (+{row['overhead_us']:.2f})")
        label = "step boundary (events, allocator stats, lazy loss)" if cuda else "step boundary (CPU part, loss read at once)"
        print(f"{label:45s} {boundary_us:7.2f} us")
        print(f"{'leak check at the boundary (steady memory)':45s} {watch_us:7.2f} us")
        for name, us in (device or {}).items():
            print(f"{name:45s} {us:7.2f} us")
    return 0


if __name__ == "__main__":
    sys.exit(main())
