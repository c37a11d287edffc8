"""``gpudoctor fix`` on shapes met in round four of the public scripts (benchmarks/results/fix/
wild4-cpu-before.md), each on a small script written here:

- ``-j`` a total the script divides by its processes per node before the loader reads it
  (pytorch/examples imagenet, moco-v3: ``args.workers = int((args.workers + ngpus_per_node - 1) /
  ngpus_per_node)``): the default is the per-process plan times the processes per node measured;
- ``from training import training_loop``: the loop in the package's module is found (EDM,
  stylegan2-ada);
- a training function nested in the one that builds the model reads it as a closure: the model's
  assignment is found there (ResNeSt's ``train()`` in ``main_worker``).
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


def test_a_loop_in_a_module_imported_from_its_package_is_found(tmp_path: Path) -> None:
    # edm / stylegan2-ada: ``from training import training_loop``, then training_loop.training_loop(...)
    (tmp_path / "training").mkdir()
    (tmp_path / "training" / "__init__.py").write_text("# empty\n", encoding="utf-8")
    (tmp_path / "training" / "training_loop.py").write_text(textwrap.dedent("""
        import torch
        from torch import nn
        from torch.utils.data import DataLoader, TensorDataset


        def training_loop(steps=2):
            model = nn.Linear(4, 2)
            optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
            loader = DataLoader(TensorDataset(torch.randn(16, 4), torch.randint(0, 2, (16,))), batch_size=4)
            for x, y in loader:
                optimizer.zero_grad()
                loss = nn.functional.cross_entropy(model(x), y)
                loss.backward()
                optimizer.step()
    """), encoding="utf-8")
    script = tmp_path / "train.py"
    source = "from training import training_loop\n\nif __name__ == '__main__':\n    training_loop.training_loop()\n"
    script.write_text(source, encoding="utf-8")
    (tmp_path / "setup.py").write_text("", encoding="utf-8")
    from fix_planning import locate_project

    found = locate_project(script, source)
    assert found.loop is not None and found.file.endswith("training/training_loop.py")
    assert found.loader_call is not None


NESTED = """
    import torch
    from torch import nn
    from torch.utils.data import DataLoader, TensorDataset


    def main():
        model = nn.Sequential(nn.Conv2d(3, 4, 3), nn.Flatten(), nn.Linear(144, 2))
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        loader = DataLoader(TensorDataset(torch.randn(8, 3, 8, 8), torch.randint(0, 2, (8,))), batch_size=4)

        def train(epoch):
            for x, y in loader:
                optimizer.zero_grad()
                loss = nn.functional.cross_entropy(model(x), y)
                loss.backward()
                optimizer.step()

        for epoch in range(2):
            train(epoch)
        print("done")


    main()
"""


def test_a_model_of_the_function_around_a_nested_training_function_is_found(tmp_path: Path) -> None:
    # resnest: def train(epoch) nested in main_worker reads model, optimizer and the loader as closures
    found, plan, fixed = planned(NESTED, "GD-RUN-LAUNCH-BOUND", "GD-RUN-CHANNELS-LAST", config=CPU, data=STALL_DATA)
    assert found.model_assign is not None and found.model_assign.lineno == 8
    assert {c.kind for c in plan.changes} >= {"compile", "channels_last"}
    lines = fixed.splitlines()
    at = next(i for i, line in enumerate(lines) if "model = nn.Sequential" in line)
    assert "model.compile()" in "\n".join(lines[at:at + 8])  # in main, after the model is built
    runs(fixed.replace("model.compile()", "pass"), tmp_path)  # inductor on 2 shared cores: left out
