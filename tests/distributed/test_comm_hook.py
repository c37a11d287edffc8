"""``parallel.comm_hook``: the engine registers PyTorch's compression hook on its DDP model."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.distributed

SRC = Path(__file__).resolve().parents[2] / "src"
SCRIPT = """
import torch
from torch.utils.data import DataLoader, TensorDataset
from gpudoctor.train import ParallelConfig, Trainer, TrainConfig

model = torch.nn.Linear(8, 3)
config = TrainConfig(device="cpu", batch_size=8, max_steps=2,
                     parallel=ParallelConfig(strategy="ddp", comm_hook="{hook}"))
trainer = Trainer(model, lambda p: torch.optim.SGD(p, lr=0.1), torch.nn.CrossEntropyLoss(), config=config)
data = TensorDataset(torch.randn(64, 8), torch.randint(0, 3, (64,)))
trainer.fit(DataLoader(data, batch_size=8), epochs=1)
print("HOOK", trainer.model._get_ddp_logging_data().get("comm_hook"))
"""


@pytest.mark.parametrize(("hook", "registered"), [("bf16", "bf16_compress_hook"), ("fp16", "fp16_compress_hook")])
def test_engine_registers_the_configured_hook(tmp_path: Path, hook: str, registered: str) -> None:
    script = tmp_path / "train.py"
    script.write_text(SCRIPT.format(hook=hook), encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK")}
    env.update(PYTHONPATH=str(SRC) + os.pathsep + env.get("PYTHONPATH", ""), OMP_NUM_THREADS="1",
               CUDA_VISIBLE_DEVICES="")
    proc = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
                           str(script)], env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.count(f"HOOK {registered}") == 2  # both ranks
