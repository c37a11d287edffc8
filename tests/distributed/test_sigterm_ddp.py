"""SIGTERM under torchrun reaching one rank only: both ranks stop at the same step and that step
is saved (the ranks agree through the process group's store, with no collective in the step)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
import torch

pytestmark = pytest.mark.distributed
SRC = Path(__file__).resolve().parents[2] / "src"

SCRIPT = textwrap.dedent("""
    import os, sys, time
    from pathlib import Path
    import torch
    from torch import nn
    from torch.utils.data import DataLoader, TensorDataset
    from gpudoctor.train import CheckpointConfig, Trainer, presets

    out = Path(sys.argv[1])
    rank = int(os.environ["RANK"])

    class Slow(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(8, 3)
            self.calls = 0
        def forward(self, x):
            self.calls += 1
            if self.calls == 3:
                (out / f"pid-{rank}").write_text(str(os.getpid()))
            time.sleep(0.02)
            return self.lin(x)

    torch.manual_seed(0)
    data = TensorDataset(torch.randn(40000, 8), torch.randint(0, 3, (40000,)))
    model = Slow()
    cfg = presets.cpu_debug().replace(checkpoint=CheckpointConfig(dir=str(out / "ckpt")))
    result = Trainer(model, torch.optim.SGD(model.parameters(), lr=0.05), nn.CrossEntropyLoss(),
                     config=cfg).fit(DataLoader(data, batch_size=8), epochs=1)
    (out / f"result-{rank}").write_text(f"{result.steps} {result.stopped_reason}")
""")


def test_sigterm_on_one_rank_stops_both_at_the_same_saved_step(tmp_path: Path) -> None:
    (tmp_path / "train.py").write_text(SCRIPT, encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK")}
    env.update(PYTHONPATH=str(SRC), OMP_NUM_THREADS="1", CUDA_VISIBLE_DEVICES="")
    proc = subprocess.Popen([sys.executable, "-m", "torch.distributed.run", "--standalone",
                             "--nproc_per_node", "2", str(tmp_path / "train.py"), str(tmp_path)],
                            env=env, start_new_session=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 120
        while not (tmp_path / "pid-1").exists() and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.1)
        assert (tmp_path / "pid-1").exists(), proc.communicate(timeout=60)[0].decode()[-3000:]
        os.kill(int((tmp_path / "pid-1").read_text()), signal.SIGTERM)  # rank 1 only, not rank 0
        output, _ = proc.communicate(timeout=180)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()
    assert proc.returncode == 0, output.decode()[-3000:]
    results = [(tmp_path / f"result-{r}").read_text().split(" ", 1) for r in (0, 1)]
    assert results[0][0] == results[1][0] and all("SIGTERM" in why for _, why in results)
    steps = int(results[0][0])
    saved = sorted(p.name for p in (tmp_path / "ckpt").glob("step-*.pt"))
    assert saved[-1] == f"step-{steps:08d}.pt" and steps < 40000 // 16
    assert torch.load(tmp_path / "ckpt" / saved[-1], weights_only=True)["progress"]["step"] == steps
