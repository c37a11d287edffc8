"""``gpudoctor run`` on 2 gloo ranks whose DDP script also all-reduces the gradients by hand
(from step 6 on) names the second reduction, and does not count DDP's own."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpudoctor.records.rundir import load_run
from tests.support.cli_runner import run_two_gloo_ranks

SCRIPT = """
import torch, torch.distributed as dist
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler
dist.init_process_group("gloo")
ds = TensorDataset(torch.randn(512, 8), torch.randn(512, 1))
sampler = DistributedSampler(ds)
loader = DataLoader(ds, batch_size=8, sampler=sampler)
model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(8, 1))
opt = torch.optim.SGD(model.parameters(), lr=0.01)
step = 0
for epoch in range(100):
    sampler.set_epoch(epoch)
    for x, y in loader:
        loss = torch.nn.functional.mse_loss(model(x), y)
        opt.zero_grad()
        loss.backward()
        if step >= 6:  # the pre-DDP habit, left in: a second reduction
            for p in model.parameters():
                dist.all_reduce(p.grad)
                p.grad /= dist.get_world_size()
        dist.all_reduce(loss.detach().clone())  # a loss average: not a gradient, not counted
        opt.step()
        step += 1
dist.destroy_process_group()
"""


@pytest.mark.distributed
def test_manual_gradient_allreduce_on_ddp_is_found(tmp_path: Path) -> None:
    findings = run_two_gloo_ranks(SCRIPT, tmp_path)
    f = findings["GD-RUN-GRAD-REDUCED-TWICE"]
    assert f["severity"] == "warn"
    run = load_run(tmp_path / "rd")
    for cfg in run.configs.values():
        # steps 6..11 (the run stops after 12), weight and bias each: 12 calls of 32 + 4 bytes each
        assert cfg.ddp.manual_grad_allreduces == 12 and cfg.ddp.manual_grad_allreduce_first_step == 6
        assert cfg.ddp.manual_grad_allreduce_bytes == 6 * (32 + 4)
