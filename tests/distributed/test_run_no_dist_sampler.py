"""``gpudoctor run`` on 2 gloo ranks training DDP without a DistributedSampler ("fine on 1 GPU,
OOM on 2": every rank iterates the whole dataset) names it."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpudoctor.records.rundir import load_run
from tests.support.cli_runner import run_two_gloo_ranks

SCRIPT = """
import torch, torch.distributed as dist
from torch.utils.data import DataLoader, TensorDataset
dist.init_process_group("gloo")
ds = TensorDataset(torch.randn(512, 8), torch.randn(512, 1))
loader = DataLoader(ds, batch_size=8, shuffle=True)   # no DistributedSampler: each rank, all 512
model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(8, 1))
opt = torch.optim.SGD(model.parameters(), lr=0.01)
for epoch in range(100):
    for x, y in loader:
        loss = torch.nn.functional.mse_loss(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
dist.destroy_process_group()
"""


@pytest.mark.distributed
def test_ddp_without_distributed_sampler_is_found(tmp_path: Path) -> None:
    findings = run_two_gloo_ranks(SCRIPT, tmp_path)
    f = findings["GD-RUN-NO-DIST-SAMPLER"]
    assert f["severity"] == "warn"
    assert f["evidence"][0] == ("rank 0 (ddp, world size 2): its training loader iterates "
                                "TensorDataset of 512 samples with RandomSampler, not a DistributedSampler")
    assert f["evidence"][1].startswith("ranks affected: 0, 1; ")
    run = load_run(tmp_path / "rd")
    assert {r: (c.ddp.kind, c.loaders[0].sampler) for r, c in run.configs.items()} == {
        0: ("ddp", "RandomSampler"), 1: ("ddp", "RandomSampler")}
