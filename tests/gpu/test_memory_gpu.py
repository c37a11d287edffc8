"""On a real GPU: the OOM dump names the line that held the memory; the estimate matches a run."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
]

GIB = 1 << 30


def _hold_two_gib():
    return torch.empty(2 * GIB, dtype=torch.uint8, device="cuda")  # the planted holder


def test_planted_oom_is_dumped_with_its_site(tmp_path) -> None:
    from gpudoctor.analysis.oom import explain_oom, top_sites
    from gpudoctor.core.memory_history import attach_oom_dump, start_history, stop_history
    from gpudoctor.records.base import read_json
    from gpudoctor.records.memory import OomSnapshot

    assert start_history()
    dump = attach_oom_dump(tmp_path)
    assert dump is not None
    held = _hold_two_gib()
    total = torch.cuda.get_device_properties(0).total_memory
    with pytest.raises(torch.OutOfMemoryError):
        torch.empty(total + GIB, dtype=torch.uint8, device="cuda")
    stop_history()
    snap = read_json(tmp_path / "oom.json", OomSnapshot, kind="oom_snapshot")
    assert snap.requested_bytes >= total and (tmp_path / "oom-snapshot.pickle").is_file()
    top = top_sites(snap)[0]
    assert "test_memory_gpu.py" in top.site and "_hold_two_gib" in top.site
    assert top.bytes >= 2 * GIB
    assert explain_oom(snap)[0].code == "GD-OOM-SHORTAGE"
    dump.detach()
    del held


def test_estimate_matches_a_real_run_within_15_percent() -> None:
    from torch import nn

    from gpudoctor.memory.estimate import EstimateConfig, estimate_memory, measure_point
    from gpudoctor.memory.inputs import batch_factory

    def model():
        return nn.Sequential(
            nn.Conv2d(3, 64, 3, padding=1), nn.BatchNorm2d(64), nn.ReLU(),
            nn.Conv2d(64, 128, 3, padding=1), nn.BatchNorm2d(128), nn.ReLU(),
            nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(128, 10),
        )

    make = batch_factory("image:3x64x64:10")
    est = estimate_memory(model, make, EstimateConfig(batch_size=256, device="cuda"))
    assert est.method == "measured-peaks"
    config = EstimateConfig(batch_size=256, device="cuda")
    measured = measure_point(model, make, 256, config, torch.device("cuda")).peak_allocated_bytes
    assert abs(est.peak_bytes - measured) / measured < 0.15, (est.peak_bytes, measured)


# ---- gpudoctor memory run -----------------------------------------------------------------------

MEMORY_TRAIN = """
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset
torch.cuda.set_device(0)
model = nn.Sequential(*[nn.Linear(1024, 1024) for _ in range(4)]).cuda()
opt = torch.optim.AdamW(model.parameters())
data = DataLoader(TensorDataset(torch.randn(512, 1024)), batch_size=64, pin_memory=True)
for epoch in range(10):
    for (x,) in data:
        x = x.cuda(non_blocking=True)
        loss = model(x).square().mean()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
"""

MEMORY_OOM = """
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset
model = nn.Linear(256, 256).cuda()
opt = torch.optim.SGD(model.parameters(), lr=0.1)
data = DataLoader(TensorDataset(torch.randn(64, 256)), batch_size=8)
held = []

def hold_two_gib():
    held.append(torch.empty(2 << 30, dtype=torch.uint8, device="cuda"))  # the planted holder

for step, (x,) in enumerate(data):
    x = x.cuda()
    loss = model(x).sum()
    if step == 1:
        hold_two_gib()
        total = torch.cuda.get_device_properties(0).total_memory
        torch.empty(total, dtype=torch.uint8, device="cuda")  # cannot fit: the OOM
    loss.backward()
    opt.step()
    opt.zero_grad()
"""


def _memory_run(tmp_path, script: str, *args: str):
    import json
    import os
    import subprocess
    import sys
    from pathlib import Path

    (tmp_path / "train.py").write_text(script, encoding="utf-8")
    src = Path(__file__).resolve().parents[2] / "src"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in (str(src), os.environ.get("PYTHONPATH", "")) if p))
    result = subprocess.run(
        [sys.executable, "-m", "gpudoctor", "memory", "run", *args, "--json", "--out", "rd", "--",
         sys.executable, "train.py"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120,
    )
    return result, (json.loads(result.stdout) if result.stdout.strip() else None)


def test_memory_run_stage_table_on_gpu(tmp_path) -> None:
    result, payload = _memory_run(tmp_path, MEMORY_TRAIN, "--steps", "8", "--stages", "3")
    assert result.returncode == 0, result.stderr
    memory = payload["memory"]
    assert memory["on_gpu"] is True
    order = [(r["stage"], r["step"]) for r in memory["rows"]]
    # the script calls zero_grad between its forward and backward (pytorch/examples' imagenet
    # order): the lines follow it, and the activations are under forward, not zero_grad
    assert order[:7] == [("model", 0), ("batch", 0), ("forward", 0), ("zero_grad", 0), ("loss", 0),
                         ("backward", 0), ("optimizer", 0)]
    assert order[-1] == ("optimizer", 2) and len(order) == 1 + 6 * 3
    forward_rows = [r for r in memory["rows"] if r["stage"] == "forward"]
    assert all(r["delta_bytes"] > 64 * 1024 * 4 for r in forward_rows), forward_rows
    freed = [r for r in memory["rows"] if r["stage"] == "zero_grad" and r["step"] == 2]
    assert freed and freed[0]["freed_bytes"] > 0  # step 1's gradients, freed by set_to_none
    param_bytes = 4 * (1024 * 1024 + 1024) * 4
    parts = memory["parts"]
    assert abs(parts["model_bytes"] - param_bytes) / param_bytes < 0.05, parts
    assert abs(parts["optimizer_first_bytes"] - 2 * param_bytes) / (2 * param_bytes) < 0.1, parts
    assert abs(parts["gradient_bytes"] - param_bytes) / param_bytes < 0.1, parts
    assert parts["activation_bytes"] > 64 * 1024 * 4  # at least one saved 64x1024 fp32 activation
    assert abs(parts["optimizer_later_bytes"]) < 0.05 * param_bytes  # no new state after step 0
    fit = memory["fit"]
    assert fit["batch_size"] == 64 and fit["max_batch_size"] > 64
    assert len(memory["curve"]) == 8


def test_planted_oom_through_memory_run(tmp_path) -> None:
    from gpudoctor.analysis.memory_stages import analyse_memory_run
    from gpudoctor.records.rundir import load_run
    from gpudoctor.report.memory_view import render_memory_run

    result, payload = _memory_run(tmp_path, MEMORY_OOM, "--steps", "6")
    assert result.returncode != 0  # the script died of the OOM; the exit code says so
    assert (tmp_path / "rd" / "oom.json").is_file() and (tmp_path / "rd" / "oom-snapshot.pickle").is_file()
    memory = payload["memory"]
    assert memory["oom_sites"][0]["site"].endswith("hold_two_gib"), memory["oom_sites"]
    assert memory["oom_sites"][0]["bytes"] >= 2 << 30
    assert "GD-OOM-SHORTAGE" in [f["code"] for f in memory["findings"]]
    import io

    from rich.console import Console

    buf = io.StringIO()
    report = analyse_memory_run(load_run(tmp_path / "rd"))
    Console(file=buf, width=100, color_system=None).print(render_memory_run(report))
    assert "trace_plot" in buf.getvalue() and "oom-snapshot.pickle" in buf.getvalue()


# ---- the engine (gpudoctor.train) ---------------------------------------------------------------

def _planted_activation(x):
    return torch.empty(2 * GIB, dtype=torch.uint8, device=x.device)  # the planted holder


class PlantedOom(torch.nn.Module):
    """A small model whose forward, for micro-batches above ``limit`` samples, holds 2 GiB and then
    asks for more than the GPU has: a real CUDA OOM, with a known top allocation site."""

    def __init__(self, limit: int = 2) -> None:
        super().__init__()
        self.inner = torch.nn.Linear(64, 10)
        self.limit = limit

    def forward(self, x):
        if x.shape[0] > self.limit:
            held = _planted_activation(x)
            total = torch.cuda.get_device_properties(x.device).total_memory
            torch.empty(total, dtype=torch.uint8, device=x.device)  # cannot fit: the OOM
            del held
        return self.inner(x)


def train_into_oom(oom_dir: str, mode: str = "on_oom"):
    """Train ``PlantedOom`` with the engine until it gives up; return the final error.

    Batches of 8, ``min_micro_batch=4``: the OOM at 8 samples is recovered (with ``on_oom`` this
    turns allocation history on), the repeat at 4 samples ends the run and is dumped with its sites.
    Shared with ``tools/gpu/jobs/66_memory_run.sh``, which renders the result for docs/examples.
    """
    from gpudoctor.train import LogConfig, RobustConfig, Trainer, TrainConfig

    torch.manual_seed(0)
    batches = [(torch.randn(8, 64, device="cuda"), torch.randint(0, 10, (8,), device="cuda")) for _ in range(4)]
    model = PlantedOom()
    cfg = TrainConfig(device="cuda", log=LogConfig(progress_bar=False, flops_per_sample=1.0),
                      robust=RobustConfig(oom_recover=True, min_micro_batch=4, oom_snapshot=mode, oom_dir=oom_dir))
    trainer = Trainer(model, torch.optim.SGD(model.parameters(), lr=0.01), torch.nn.CrossEntropyLoss(), config=cfg)
    try:
        trainer.fit(batches, epochs=1)
    except torch.OutOfMemoryError as exc:
        return exc
    raise AssertionError("the planted OOM did not happen")


def test_planted_oom_through_the_engine(tmp_path) -> None:
    import pickle
    import warnings

    from gpudoctor.analysis.oom import explain_oom, top_sites
    from gpudoctor.core.memory_history import history_enabled
    from gpudoctor.records.base import read_json
    from gpudoctor.records.memory import OomSnapshot

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        error = train_into_oom(str(tmp_path))
    retry = [str(w.message) for w in caught if "retrying" in str(w.message)]
    assert len(retry) == 1 and "recording allocation history" in retry[0], retry
    assert f"gpudoctor memory show {tmp_path / 'oom-rank0.json'}" in str(error)
    snap = read_json(tmp_path / "oom-rank0.json", OomSnapshot, kind="oom_snapshot")
    pickle_path = tmp_path / "oom-snapshot-rank0.pickle"
    assert snap.pickle_path == str(pickle_path) and snap.step == 0
    with open(pickle_path, "rb") as fh:
        full = pickle.load(fh)
    assert full["segments"] and any(full["device_traces"])  # what PyTorch's viewer draws
    top = top_sites(snap)[0]
    assert "test_memory_gpu.py" in top.site and "_planted_activation" in top.site, top_sites(snap)
    assert top.bytes >= 2 * GIB
    assert snap.requested_bytes >= torch.cuda.get_device_properties(0).total_memory
    assert explain_oom(snap)[0].code == "GD-OOM-SHORTAGE"
    assert not history_enabled()  # the engine stopped the recording it started


def test_engine_always_mode_has_the_sites_at_the_first_oom(tmp_path) -> None:
    from gpudoctor.analysis.oom import top_sites
    from gpudoctor.records.base import read_json
    from gpudoctor.records.memory import OomSnapshot

    with pytest.warns(RuntimeWarning, match="retrying") as caught:
        train_into_oom(str(tmp_path), mode="always")
    first = next(str(w.message) for w in caught if "retrying" in str(w.message))
    assert "oom-snapshot-rank0.pickle" in first  # the first OOM already has the full snapshot
    snap = read_json(tmp_path / "oom-rank0.json", OomSnapshot, kind="oom_snapshot")
    assert "_planted_activation" in top_sites(snap)[0].site
