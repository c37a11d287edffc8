"""``gpudoctor fix`` on shapes met in round five of the public scripts (benchmarks/results/fix/
wild5-cpu-before.md), each on a small script written here:

- a module of the project holds a loop with ``backward`` in a method of a class the script never
  names (DomainBed: ``algorithms.get_algorithm_class(args.algorithm)`` picks one of ~30 classes at
  run time; the loop found was ``Fish.update``'s): not the training loop, no patch there;
- the loader's ``num_workers`` read from a config object is replaced by the planned count, and the
  periodic stall's ``persistent_workers`` is ``True`` on it, not guarded by the replaced setting
  (ddim: ``persistent_workers=config.data.num_workers > 0`` beside ``num_workers=8``).
"""

from __future__ import annotations

import textwrap
from pathlib import Path

from fix_planning import CPU, GPU, STALL_DATA, planned, runs

ALGORITHMS = """
    import torch
    from torch import nn


    def get_algorithm_class(name):
        return globals()[name]


    class ERM(nn.Module):
        def __init__(self):
            super().__init__()
            self.net = nn.Linear(4, 2)
            self.opt = torch.optim.SGD(self.net.parameters(), lr=0.1)

        def update(self, minibatches):
            x = torch.cat([x for x, _ in minibatches])
            y = torch.cat([y for _, y in minibatches])
            loss = nn.functional.cross_entropy(self.net(x), y)
            self.opt.zero_grad()
            loss.backward()
            self.opt.step()


    class Fish(ERM):
        def update(self, minibatches):
            for x, y in minibatches:
                loss = nn.functional.cross_entropy(self.net(x), y)
                self.opt.zero_grad()
                loss.backward()
                self.opt.step()
"""

PICKED = """
    import argparse

    import torch

    from algos import algorithms

    parser = argparse.ArgumentParser()
    parser.add_argument("--algorithm", default="ERM")
    args = parser.parse_args()
    algorithm = algorithms.get_algorithm_class(args.algorithm)()
    for step in range(3):
        minibatches = [(torch.randn(4, 4), torch.randint(0, 2, (4,))) for _ in range(2)]
        algorithm.update(minibatches)
    print("done")
"""


def _project(tmp_path: Path, script: str) -> tuple[Path, str]:
    (tmp_path / "algos").mkdir()
    (tmp_path / "algos" / "__init__.py").write_text("", encoding="utf-8")
    (tmp_path / "algos" / "algorithms.py").write_text(textwrap.dedent(ALGORITHMS), encoding="utf-8")
    (tmp_path / "setup.py").write_text("", encoding="utf-8")
    path = tmp_path / "train.py"
    source = textwrap.dedent(script)
    path.write_text(source, encoding="utf-8")
    return path, source


def test_a_loop_in_a_class_the_script_never_names_is_not_its_training_loop(tmp_path: Path) -> None:
    path, source = _project(tmp_path, PICKED)
    found, plan, fixed = planned(source, "GD-RUN-FP32-COMPUTE", path=path)
    assert found.loop is None and not plan.changes and fixed == source
    note = " ".join(found.notes)
    assert "Fish" in note and "never names" in note, note
    runs(fixed, tmp_path)  # the script as it is still trains (ERM by default)


def test_a_loop_in_a_class_the_script_names_is_still_found(tmp_path: Path) -> None:
    path, source = _project(tmp_path, PICKED.replace("algorithms.get_algorithm_class(args.algorithm)()",
                                                     "algorithms.Fish()"))
    found, plan, fixed = planned(source, "GD-RUN-FP32-COMPUTE", path=path)
    assert found.loop is not None and found.file.endswith("algos/algorithms.py")
    assert any(c.kind == "bf16" for c in plan.changes)


CONFIGURED = """
    import types

    import torch
    from torch import nn
    from torch.utils.data import DataLoader, TensorDataset

    config = types.SimpleNamespace(data=types.SimpleNamespace(num_workers=0))


    def train():
        model = nn.Linear(4, 2)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        ds = TensorDataset(torch.randn(16, 4), torch.randint(0, 2, (16,)))
        loader = DataLoader(ds, batch_size=4, shuffle=True, num_workers=config.data.num_workers)
        for epoch in range(2):
            for x, y in loader:
                optimizer.zero_grad()
                loss = nn.functional.cross_entropy(model(x), y)
                loss.backward()
                optimizer.step()


    if __name__ == "__main__":
        train()
        print("done")
"""


def test_workers_kept_alive_on_the_count_that_replaced_a_config_setting(tmp_path: Path) -> None:
    _, plan, fixed = planned(CONFIGURED, "GD-RUN-DATALOADER", "GD-RUN-PERIODIC-STALL", data=STALL_DATA)
    assert {"loader", "persistent"} <= {c.kind for c in plan.changes}
    call = next(line for line in fixed.splitlines() if "loader = DataLoader(" in line)
    assert "num_workers=8" in call and "persistent_workers=True" in call, call
    assert "config.data.num_workers > 0" not in fixed
    # the CPU plan: 2 usable cores give workers too; the patched copy trains (workers start, persist)
    _, _, cpu_fixed = planned(CONFIGURED, "GD-RUN-DATALOADER", "GD-RUN-PERIODIC-STALL", config=CPU, data=STALL_DATA)
    runs(cpu_fixed, tmp_path)


def test_the_stall_alone_still_guards_on_the_scripts_own_count() -> None:
    _, plan, fixed = planned(CONFIGURED, "GD-RUN-PERIODIC-STALL", data=STALL_DATA)
    assert [c.kind for c in plan.changes] == ["persistent"]
    assert "persistent_workers=config.data.num_workers > 0" in fixed


def test_a_loop_in_a_function_called_by_one_the_script_names_is_found(tmp_path: Path) -> None:
    # mnist_hogwild: main.py calls train.train(...), which calls train_epoch(...), which holds the loop
    (tmp_path / "algos").mkdir()
    (tmp_path / "algos" / "__init__.py").write_text("", encoding="utf-8")
    (tmp_path / "algos" / "algorithms.py").write_text(textwrap.dedent(ALGORITHMS) + textwrap.dedent("""

        def run(steps):
            return Fish()
    """), encoding="utf-8")
    (tmp_path / "setup.py").write_text("", encoding="utf-8")
    source = textwrap.dedent(PICKED).replace("algorithms.get_algorithm_class(args.algorithm)()", "algorithms.run(3)")
    (tmp_path / "train.py").write_text(source, encoding="utf-8")
    found, plan, _ = planned(source, "GD-RUN-FP32-COMPUTE", path=tmp_path / "train.py")
    assert found.loop is not None and found.file.endswith("algos/algorithms.py")
