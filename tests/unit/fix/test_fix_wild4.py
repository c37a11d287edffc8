"""``gpudoctor fix`` on shapes met in round four of the public scripts (benchmarks/results/fix/
wild4-cpu-before.md), each on a small script written here:

- ``-j`` a total the script divides by its processes per node before the loader reads it
  (pytorch/examples imagenet, moco-v3: ``args.workers = int((args.workers + ngpus_per_node - 1) /
  ngpus_per_node)``): the default is the per-process plan times the processes per node measured.
"""

from __future__ import annotations

import dataclasses
import re
import textwrap
from pathlib import Path

from fix_planning import CPU, GPU, STALL_DATA, planned, runs

DIVIDED = """
    import argparse

    import torch
    from torch import nn
    from torch.utils.data import DataLoader, TensorDataset

    parser = argparse.ArgumentParser()
    parser.add_argument("-j", "--workers", default=32, type=int, help="total data loading workers (default: 32)")
    parser.add_argument("--distributed", action="store_true")


    def main():
        args = parser.parse_args()
        ngpus_per_node = max(torch.cuda.device_count(), 1)
        main_worker(0, ngpus_per_node, args)


    def main_worker(gpu, ngpus_per_node, args):
        if args.distributed:
            args.workers = int((args.workers + ngpus_per_node - 1) / {divisor})
        model = nn.Linear(4, 2)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        ds = TensorDataset(torch.randn(16, 4), torch.randint(0, 2, (16,)))
        loader = DataLoader(ds, batch_size=4, shuffle=True, num_workers=args.workers)
        for x, y in loader:
            optimizer.zero_grad()
            loss = nn.functional.cross_entropy(model(x), y)
            loss.backward()
            optimizer.step()
        print("done")


    if __name__ == "__main__":
        main()
"""

EIGHT = dataclasses.replace(GPU, world_size=8, local_world_size=8, usable_cpus=128)


def _default(fixed: str) -> str:
    return re.search(r'"--workers", default=(\w+)', fixed).group(1)


def test_a_worker_total_divided_per_node_is_scaled_back_to_a_total(tmp_path: Path) -> None:
    source = DIVIDED.replace("{divisor}", "ngpus_per_node")
    _, plan, fixed = planned(source, "GD-RUN-DATALOADER", config=EIGHT, data=STALL_DATA)
    # 16 cores a rank: 8 workers a process, times the 8 processes of the node (the script divides by 8)
    assert _default(fixed) == "64"
    why = " ".join(o.why for c in plan.changes if c.kind == "loader" for o in c.ops)
    assert "64 data-loading workers in all: the default of -j/--workers (was 32) (a total per node" in why
    assert "a total per node: line 21 divides it by ngpus_per_node; 8 per process x 8 processes measured" in why
    assert "num_workers=args.workers," in fixed  # the call still reads the flag
    assert "(default: 64)" in fixed
    runs(fixed, tmp_path, "-j", "0")


def test_one_process_measured_keeps_the_per_process_value() -> None:
    # the single-process imagenet case: the division is skipped (or divides by 1): the default is the plan
    _, _, fixed = planned(DIVIDED.replace("{divisor}", "ngpus_per_node"), "GD-RUN-DATALOADER", data=STALL_DATA)
    assert _default(fixed) == "8"


def test_a_divisor_it_cannot_count_leaves_the_default_alone_with_the_reason() -> None:
    _, plan, fixed = planned(DIVIDED.replace("{divisor}", "args.shards"), "GD-RUN-DATALOADER", config=EIGHT,
                             data=STALL_DATA)
    assert _default(fixed) == "32"
    why = " ".join(o.why for c in plan.changes if c.kind == "loader" for o in c.ops)
    assert "num_workers kept: line 21 divides workers by args.shards" in why
