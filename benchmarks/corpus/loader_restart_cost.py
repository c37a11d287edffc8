"""The cost of a loader whose workers start at every pass: the corpus' super_resolution test loader.

super_resolution (pytorch/examples) builds its test loader with ``num_workers=opt.threads`` and no
``persistent_workers``, and iterates it after every 4-step training epoch. This times one pass of
that loader per "epoch", 6 epochs, with its 4 workers started each pass, 8 started each pass (what
``gpudoctor fix`` raising the shared ``--threads`` default did) and 8 kept alive (what it does now):
the mechanism behind benchmarks/results/fix/corpus-4.md's super_resolution row, on any machine.

    PYTHONPATH=<torchvision dir> python3 benchmarks/corpus/loader_restart_cost.py --work /tmp/srwork

``--work``: a harness work tree (``harness.prepare_work``: the carried corpus plus synthetic data);
made here when absent.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import harness  # noqa: E402

SETTINGS = ((4, False), (8, False), (8, True))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--work", type=Path, default=Path("/tmp/gpudoctor-loader-restart"))
    p.add_argument("--corpus", type=Path, default=harness.DEFAULT_CORPUS)
    p.add_argument("--epochs", type=int, default=6)
    args = p.parse_args()
    folder = args.work / "orig" / "pytorch-examples" / "super_resolution"
    if not folder.is_dir():
        harness.prepare_work(args.corpus, args.work, scale=1.0)
    sys.path.insert(0, str(folder))
    from data import get_test_set  # the script's own data module (runs from its folder)
    from torch.utils.data import DataLoader

    os.chdir(folder)
    test_set = get_test_set(3)
    for workers, persistent in SETTINGS:
        loader = DataLoader(test_set, num_workers=workers, batch_size=10, shuffle=False,
                            persistent_workers=persistent)
        times = []
        for _ in range(args.epochs):
            t0 = time.perf_counter()
            for _ in loader:
                pass
            times.append(time.perf_counter() - t0)
        steady = times[1:]
        print(f"workers={workers} persistent={persistent}: first {times[0] * 1e3:.0f} ms, then median "
              f"{statistics.median(steady) * 1e3:.0f} ms (min {min(steady) * 1e3:.0f}, max {max(steady) * 1e3:.0f}) "
              "per epoch", flush=True)
        del loader


if __name__ == "__main__":
    main()
