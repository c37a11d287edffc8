"""``parallel.comm_hook``: the engine registers PyTorch's compression hook on its DDP model; and
``with Trainer(...)`` leaves a process group the trainer joined, never one the script made."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.distributed

SRC = Path(__file__).resolve().parents[2] / "src"
SCRIPT = """
import json
import os
from pathlib import Path

import torch
import torch.distributed as dist
from torch.utils.data import DataLoader, TensorDataset
from gpudoctor.core.dist import destroy_distributed
from gpudoctor.train import ParallelConfig, Trainer, TrainConfig

if {script_owns_group}:
    dist.init_process_group("gloo")
model = torch.nn.Linear(8, 3)
config = TrainConfig(device="cpu", batch_size=8, max_steps=2,
                     parallel=ParallelConfig(strategy="ddp", comm_hook="{hook}"))
with Trainer(model, lambda p: torch.optim.SGD(p, lr=0.1), torch.nn.CrossEntropyLoss(), config=config) as trainer:
    data = TensorDataset(torch.randn(64, 8), torch.randint(0, 3, (64,)))
    trainer.fit(DataLoader(data, batch_size=8), epochs=1)
    hook = trainer.model._get_ddp_logging_data().get("comm_hook")
facts = {{"hook": hook, "group_after": dist.is_initialized()}}
destroy_distributed()  # the script's own end (a barrier first: PyTorch issue 190489)
# One file per rank: two ranks printing to one pipe can interleave their lines.
(Path({out!r}) / f"rank{{os.environ['RANK']}}.json").write_text(json.dumps(facts), encoding="utf-8")
"""


@pytest.mark.parametrize(("hook", "registered", "script_owns_group"),
                         [("bf16", "bf16_compress_hook", False), ("fp16", "fp16_compress_hook", True)])
def test_engine_registers_the_configured_hook(tmp_path: Path, hook: str, registered: str,
                                              script_owns_group: bool) -> None:
    script = tmp_path / "train.py"
    script.write_text(SCRIPT.format(hook=hook, out=str(tmp_path), script_owns_group=script_owns_group),
                      encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK")}
    env.update(PYTHONPATH=str(SRC) + os.pathsep + env.get("PYTHONPATH", ""), OMP_NUM_THREADS="1",
               CUDA_VISIBLE_DEVICES="")
    proc = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
                           str(script)], env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    facts = [json.loads((tmp_path / f"rank{r}.json").read_text(encoding="utf-8")) for r in (0, 1)]
    # the trainer leaves a group it joined; a group the script made stays for the script to end
    assert facts == [{"hook": registered, "group_after": script_owns_group}] * 2
