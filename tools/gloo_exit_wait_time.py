"""Time ``wait_for_idle_threads`` at the end of the FSDP2 job of tests/distributed (2 gloo ranks).

    OMP_NUM_THREADS=1 CUDA_VISIBLE_DEVICES= PYTHONPATH=src \
        python -m torch.distributed.run --standalone --nproc_per_node 2 tools/gloo_exit_wait_time.py OUTDIR

Each rank prints ``WAIT rank=R idle=True|False ms=…`` when ``Trainer.close()`` has waited.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "distributed"))

import train_worker  # noqa: E402

from gpudoctor.core import dist  # noqa: E402

_wait = dist.wait_for_idle_threads


def _timed_wait(*args, **kwargs) -> bool:
    start = time.perf_counter()
    idle = _wait(*args, **kwargs)
    print(f"WAIT rank={os.environ['RANK']} idle={idle} ms={(time.perf_counter() - start) * 1000:.2f}", flush=True)
    return idle


if __name__ == "__main__":
    dist.wait_for_idle_threads = _timed_wait
    sys.argv = [sys.argv[0], sys.argv[1], "--strategy", "fsdp"]
    train_worker.main()
