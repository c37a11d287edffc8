"""``gpudoctor fix`` on shapes met in round three of the public scripts (benchmarks/results/fix/
wild3-cpu-before.md), each on a small script written here:

- an epoch loop that calls ``sampler.set_epoch(epoch)`` already: no second call (DiT);
- a project that builds its own CUDA ops (``torch.utils.cpp_extension``): bf16 autocast stays
  advice, the ops' kernels may not take bf16 (stylegan2-pytorch);
- a dataset that opens ``h5py.File`` in ``__init__``: the script's worker count is kept (image
  captioning: "only 1 works with h5py");
- ``global args`` parsed in ``main()``: ``--workers`` is traced, its default edited (swav).
"""

from __future__ import annotations

import ast
import subprocess
import sys
import textwrap
from pathlib import Path

from gpudoctor.cli.fix_flow import patch_all
from gpudoctor.fix.locate import locate
from gpudoctor.fix.plan import plan_fix
from gpudoctor.fix.project import locate_project
from gpudoctor.records.finding import Finding, Severity
from gpudoctor.records.run import RankConfig

GPU = RankConfig(rank=0, local_rank=0, world_size=1, pid=1, device="cuda:0", device_name="NVIDIA H200",
                 usable_cpus=16, channels_last=False)
CPU = RankConfig(rank=0, local_rank=0, world_size=1, pid=1, device="cpu", usable_cpus=2, channels_last=False)


def planned(source: str, *codes: str, config: RankConfig = GPU, path: Path | None = None):
    """The plan for ``codes`` as WARNs, and the patched source (which must parse)."""
    source = textwrap.dedent(source)
    found = locate_project(path, source) if path is not None else locate(source)
    found_codes = [Finding(code=c, severity=Severity.WARN, title=c, fix=f"the fix for {c}",
                           data=(("worker_restart", 1.0), ("first_batch_wait_ms", 50.0))) for c in codes]
    plan = plan_fix(found, found_codes, config)
    fixed, dropped = patch_all({"": source}, path or Path("train.py"), plan.changes)
    assert not dropped
    ast.parse(fixed[""])
    return found, plan, fixed[""]


def advice(plan, kind: str) -> str:
    return next(a.reason for a in plan.advice if a.reason.startswith(f"{kind}:"))


def runs(code: str, tmp_path: Path) -> None:
    """The patched script trains on the CPU (it prints ``done`` at its end)."""
    script = tmp_path / "patched.py"
    script.write_text(code, encoding="utf-8")
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip().endswith("done")

LOOP = """
    for epoch in range(2):
        {set_epoch}
        for x, y in loader:
            x = x.to(device)
            optimizer.zero_grad()
            out = model(x)
            loss = loss_fn(out, y)
            loss.backward()
            optimizer.step()
"""


def _ddp_script(set_epoch: str) -> str:
    return textwrap.dedent("""
        import torch
        from torch import nn
        from torch.utils.data import DataLoader, TensorDataset
        from torch.utils.data.distributed import DistributedSampler

        device = "cpu"
        model = nn.Linear(4, 2)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        loss_fn = nn.CrossEntropyLoss()
        ds = TensorDataset(torch.randn(16, 4), torch.randint(0, 2, (16,)))
        sampler = DistributedSampler(ds, num_replicas=1, rank=0)
        loader = DataLoader(ds, batch_size=4, sampler=sampler)
    """) + textwrap.dedent(LOOP).replace("{set_epoch}", set_epoch) + 'print("done")\n'


def test_an_epoch_loop_that_sets_the_epoch_already_gets_no_second_call(tmp_path: Path) -> None:
    _, plan, fixed = planned(_ddp_script("sampler.set_epoch(epoch)"), "GD-RUN-NO-SET-EPOCH")
    assert not plan.changes and fixed.count("set_epoch(") == 1
    assert "already calls sampler.set_epoch" in advice(plan, "set_epoch")
    _, plan, fixed = planned(_ddp_script("pass"), "GD-RUN-NO-SET-EPOCH")  # without it: added
    assert [c.kind for c in plan.changes] == ["set_epoch"] and fixed.count("sampler.set_epoch(epoch)") == 1
    runs(fixed, tmp_path)


CONV_TRAIN = """
    import torch
    from torch import nn
    import {module}

    model = nn.Sequential(nn.Conv2d(3, 4, 3), nn.Flatten(), nn.LazyLinear(2))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for step in range(3):
        x = torch.randn(2, 3, 8, 8)
        optimizer.zero_grad()
        out = model(x)
        loss = out.sum()
        loss.backward()
        optimizer.step()
"""


def test_a_project_with_its_own_cuda_ops_keeps_bf16_as_advice(tmp_path: Path) -> None:
    (tmp_path / "op").mkdir()
    (tmp_path / "op" / "__init__.py").write_text("from .fused import fused_act\n")
    (tmp_path / "op" / "fused.py").write_text(
        "from torch.utils.cpp_extension import load\n"
        "fused = None  # load('fused', sources=['fused.cpp', 'fused_kernel.cu']) in the real project\n"
        "def fused_act(x):\n    return x\n")
    script = tmp_path / "train.py"
    source = textwrap.dedent(CONV_TRAIN).replace("{module}", "op")
    script.write_text(source)
    _, plan, fixed = planned(source, "GD-RUN-FP32-COMPUTE", path=script)
    assert "bf16" not in [c.kind for c in plan.changes] and "autocast" not in fixed
    reason = advice(plan, "bf16")
    assert "cpp_extension" in reason and "fused.py" in reason
    assert "tf32" in [c.kind for c in plan.changes]  # the rest of the finding's fix still applies
    # a project without its own ops: autocast as before
    (tmp_path / "plain.py").write_text("import torch\n")
    source = textwrap.dedent(CONV_TRAIN).replace("{module}", "plain")
    script.write_text(source)
    _, plan, fixed = planned(source, "GD-RUN-FP32-COMPUTE", path=script)
    assert "bf16" in [c.kind for c in plan.changes] and "torch.autocast" in fixed


H5_TRAIN = """
    import torch
    from torch import nn
    from torch.utils.data import DataLoader, Dataset
    {h5import}

    workers = 1  # for data-loading; right now, only 1 works with h5py


    class Caps(Dataset):
        def __init__(self, path):
            self.h = {opener}
            self.n = 8

        def __len__(self):
            return self.n

        def __getitem__(self, i):
            return torch.randn(4), i % 2


    def main():
        model = nn.Linear(4, 2)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        loader = DataLoader(Caps("x.h5"), batch_size=4, shuffle=True, num_workers=workers, pin_memory=True)
        for x, y in loader:
            optimizer.zero_grad()
            loss = nn.functional.cross_entropy(model(x), y)
            loss.backward()
            optimizer.step()
        print("done")


    main()
"""


def test_a_dataset_opening_h5py_in_init_keeps_the_scripts_worker_count() -> None:
    source = H5_TRAIN.replace("{h5import}", "import h5py").replace("{opener}", 'h5py.File(path, "r")')
    _, plan, fixed = planned(source, "GD-RUN-DATALOADER", "GD-RUN-PERIODIC-STALL")
    call = next(n for n in ast.walk(ast.parse(fixed)) if isinstance(n, ast.Call) and getattr(n.func, "id", "") ==
                "DataLoader")
    kw = {k.arg: ast.unparse(k.value) for k in call.keywords}
    assert kw["num_workers"] == "workers"  # not a literal 8
    assert kw["persistent_workers"] == "workers > 0" and kw["prefetch_factor"] == "4 if workers > 0 else None"
    why = next(o.why for c in plan.changes if c.kind == "loader" for o in c.ops)
    assert "h5py.File" in why and "line 12" in why
    # the same dataset without h5py: the planned worker count, as before
    source = H5_TRAIN.replace("{h5import}", "").replace("{opener}", "open(path)")
    _, plan, fixed = planned(source, "GD-RUN-DATALOADER")
    assert "num_workers=8" in fixed


GLOBAL_ARGS = """
    import argparse
    import torch
    from torch import nn
    from torch.utils.data import DataLoader, TensorDataset

    parser = argparse.ArgumentParser()
    parser.add_argument("--workers", default=2, type=int, help="number of data loading workers")


    def main():
        global args
        args = parser.parse_args()
        model = nn.Linear(4, 2)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        ds = TensorDataset(torch.randn(16, 4), torch.randint(0, 2, (16,)))
        loader = DataLoader(ds, batch_size=4, num_workers=args.workers)
        for x, y in loader:
            optimizer.zero_grad()
            loss = nn.functional.cross_entropy(model(x), y)
            loss.backward()
            optimizer.step()
        print("done")


    if __name__ == "__main__":
        main()
"""


def test_global_args_parsed_in_main_is_traced_to_its_option(tmp_path: Path) -> None:
    _, plan, fixed = planned(GLOBAL_ARGS, "GD-RUN-DATALOADER", config=CPU)
    assert "num_workers=args.workers" in fixed  # the call still reads the option
    assert 'add_argument("--workers", default=' in fixed and 'default=2,' not in fixed
    loader = next(c for c in plan.changes if c.kind == "loader")
    assert [e.flags for e in loader.options] == [("--workers",)]
    runs(fixed, tmp_path)
    # a second function binding the global to something else: not traced (a literal on the call)
    other = GLOBAL_ARGS.replace("\n\n    if __name__", "\n\n    def reset():\n        global args\n"
                                "        args = None\n\n\n    if __name__")
    _, plan, fixed = planned(other, "GD-RUN-DATALOADER", config=CPU)
    assert "default=2," in fixed and "num_workers=args.workers" not in fixed
