"""``gpudoctor.watch`` on every torchrun rank: 2 gloo ranks on the CPU write one run directory."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from gpudoctor.records.rundir import load_run

SRC = Path(__file__).resolve().parents[2] / "src"
SCRIPT = """
import os, sys, time, torch, torch.distributed as dist
from torch.utils.data import DataLoader, Dataset
from torch.utils.data.distributed import DistributedSampler
import gpudoctor
dist.init_process_group("gloo")
class Slow(Dataset):
    def __len__(self): return 4096
    def __getitem__(self, i):
        time.sleep(0.002)  # the planted problem: per-sample work in the main process
        return torch.randn(32), i % 4
ds = Slow()
sampler = DistributedSampler(ds)
sampler.set_epoch(0)
loader = DataLoader(ds, batch_size=16, sampler=sampler)
model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(32, 4))
opt = torch.optim.SGD(model.parameters(), lr=0.01)
with gpudoctor.watch(steps=12, sample=False, quiet=True) as w:
    for i, (x, y) in enumerate(loader):
        loss = torch.nn.functional.cross_entropy(model(x), y)
        opt.zero_grad(); loss.backward(); opt.step()
        if i == 15: break
# one file per rank: two ranks printing to one pipe interleave their words when stdout is
# unbuffered (PYTHONUNBUFFERED=1)
with open(f"result-{dist.get_rank()}.txt", "w") as f:
    f.write(f"RESULT {dist.get_rank()} {w.status} {w.run_dir} {i + 1}\\n")
# barrier, destroy, and wait for gloo's threads: a bare destroy_process_group() lets a finished
# gloo job abort at interpreter exit now and then (PyTorch issue 190489,
# benchmarks/results/gloo_exit_abort.txt); what this test checks is the run directory
from gpudoctor.core.dist import destroy_distributed
destroy_distributed()
"""


@pytest.mark.distributed
def test_every_rank_writes_its_files_into_one_run_directory(tmp_path: Path) -> None:
    (tmp_path / "train.py").write_text(SCRIPT, encoding="utf-8")
    torchrun = shutil.which("torchrun") or str(Path(sys.executable).with_name("torchrun"))
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPUDOCTOR_")}
    env["PYTHONPATH"] = str(SRC)
    out = subprocess.run([torchrun, "--standalone", "--nproc_per_node", "2", "train.py"], cwd=tmp_path,
                         env=env, capture_output=True, text=True, timeout=240, check=False)
    assert out.returncode == 0, out.stderr[-3000:]
    results = sorted(path.read_text().split()[1:] for path in tmp_path.glob("result-*.txt"))
    assert [r[0] for r in results] == ["0", "1"] and {r[1] for r in results} == {"stopped"}
    assert {r[3] for r in results} == {"16"}  # both loops went on after the 12 observed steps
    (run_dir,) = {r[2] for r in results}
    assert Path(run_dir).parent == Path("gpudoctor-runs") and Path(run_dir).name.startswith("watch-")
    run = load_run(tmp_path / run_dir)
    assert {k: len(v) for k, v in run.steps.items()} == {0: 12, 1: 12}
    assert set(run.configs) == {0, 1} and run.configs[1].world_size == 2
    assert run.manifest.ranks == (0, 1)
    from gpudoctor.analysis.diagnose import diagnose

    assert "GD-RUN-DATALOADER" in [f.code for f in diagnose(run)]
