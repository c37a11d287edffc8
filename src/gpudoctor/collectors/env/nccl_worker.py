"""One rank of the check's all-reduce: ``python -m gpudoctor.collectors.env.nccl_worker``.

Started by the probe with ``--rank``/``--world-size``/``--port``; it imports torch, creates its
context and the NCCL communicator (overlapping the probe's own work), then waits for ``go`` on
stdin before the all-reduce, so that its GPU load does not disturb the probe's timings. Each rank fills
a 64 MiB float32 tensor with ``rank + 1`` and all-reduces it over NCCL on 127.0.0.1; the sum
must be ``world_size * (world_size + 1) / 2`` everywhere. Rank 0 prints one JSON line (a
:class:`~gpudoctor.records.env.NcclProbe`). ``--backend gloo`` runs the same on the CPU, which
is how the CPU test suite exercises this code.
"""

from __future__ import annotations

import argparse
import datetime
import json
import statistics
import sys
import time

NUMEL = 16 * 1024 * 1024  # 64 MiB of float32: big enough to exercise NVLink/PCIe bandwidth


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m gpudoctor.collectors.env.nccl_worker")
    parser.add_argument("--rank", type=int, required=True)
    parser.add_argument("--world-size", type=int, required=True)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--timeout-s", type=float, default=30.0)
    parser.add_argument("--backend", choices=("nccl", "gloo"), default="nccl")
    parser.add_argument("--numel", type=int, default=NUMEL)
    args = parser.parse_args(argv)
    import torch
    import torch.distributed as dist

    gpu = args.backend == "nccl"
    device = torch.device("cuda", args.rank) if gpu else torch.device("cpu")
    extra = {}
    if gpu:
        torch.cuda.set_device(device)  # before init_process_group, so NCCL binds the right GPU
        extra["device_id"] = device
    dist.init_process_group(args.backend, init_method=f"tcp://127.0.0.1:{args.port}",
                            rank=args.rank, world_size=args.world_size,
                            timeout=datetime.timedelta(seconds=args.timeout_s), **extra)
    try:
        x = torch.full((args.numel,), float(args.rank + 1), device=device)
        # Contexts and the communicator are set up while the probe measures; only the
        # collectives, which load the GPUs, wait for its "go".
        if sys.stdin.readline().strip() != "go":
            return 3
        dist.all_reduce(x)
        expected = args.world_size * (args.world_size + 1) / 2
        lo, hi = float(x.min()), float(x.max())  # .item() syncs: the collective has finished
        times = [_time_once(torch, dist, x, gpu) for _ in range(5)]
        if args.rank == 0:
            ok = lo == hi == expected
            print(json.dumps({"status": "ok" if ok else "wrong_sum", "world_size": args.world_size,
                              "expected": expected, "got": hi if lo == hi else lo,
                              "bytes": args.numel * 4, "ms": statistics.median(times)}), flush=True)
    finally:
        dist.destroy_process_group()
    return 0


def _time_once(torch, dist, x, gpu: bool) -> float:
    if not gpu:
        t0 = time.perf_counter()
        dist.all_reduce(x)  # gloo on the CPU is synchronous
        return (time.perf_counter() - t0) * 1000.0
    start = torch.cuda.Event(enable_timing=True)
    end = torch.cuda.Event(enable_timing=True)
    start.record()
    dist.all_reduce(x)
    end.record()
    end.synchronize()  # sync point: read this repetition's time
    return start.elapsed_time(end)


if __name__ == "__main__":
    sys.exit(main())
