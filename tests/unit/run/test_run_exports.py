"""``run --trace-dir`` / ``--scalars`` / ``--nvtx`` and the engine's ScalarsObserver, on the CPU."""

from __future__ import annotations

import csv
import gzip
import json
import re
import socket
from pathlib import Path

import pytest
import torch
from cli_runner import gpudoctor
from torch.utils.data import DataLoader, TensorDataset

import gpudoctor as gd
from gpudoctor.collectors.inprocess import wrappers_in_place
from gpudoctor.collectors.instrument import nvtx
from gpudoctor.core.scalars import COLUMNS, gpu_util_at
from gpudoctor.records.gpu import GpuSample
from gpudoctor.train import ScalarsObserver, Trainer, presets

SCRIPT = """
import torch
from torch.utils.data import DataLoader, TensorDataset
ds = TensorDataset(torch.randn(512, 32), torch.randint(0, 4, (512,)))
model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 4))
opt = torch.optim.SGD(model.parameters(), lr=0.01)
for epoch in range(5):
    for x, y in DataLoader(ds, batch_size=16):
        loss = torch.nn.functional.cross_entropy(model(x), y)
        opt.zero_grad(); loss.backward(); opt.step()
"""
TRACE_NAME = re.compile(rf"{re.escape(socket.gethostname())}_rank0\.\d+\.pt\.trace\.json\.gz")


def _chrome_trace(path: Path) -> dict:
    with gzip.open(path, "rt", encoding="utf-8") as fh:
        trace = json.load(fh)
    assert isinstance(trace["traceEvents"], list) and trace["traceEvents"]
    return trace


def _loop(steps: int) -> None:
    ds = TensorDataset(torch.randn(256, 32), torch.randint(0, 4, (256,)))
    model = torch.nn.Linear(32, 4)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    for i, (x, y) in enumerate(DataLoader(ds, batch_size=8)):
        loss = torch.nn.functional.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        if i + 1 == steps:
            return


def test_run_writes_a_tensorboard_layout_trace_and_step_scalars(tmp_path: Path) -> None:
    (tmp_path / "train.py").write_text(SCRIPT, encoding="utf-8")
    out = gpudoctor("run", "--steps", "16", "--out", "r", "--trace-dir", "traces", "--scalars", "sc",
                    "--nvtx", "--json", "python", "train.py", cwd=tmp_path, timeout=240)
    assert out.returncode in (0, 1), out.stderr[-2000:]
    payload = json.loads(out.stdout)
    traces = sorted((tmp_path / "traces").iterdir())
    assert [p.name for p in traces if TRACE_NAME.fullmatch(p.name)] == [p.name for p in traces]
    assert len(traces) == 1 and [Path(p).name for p in payload["traces"]] == [traces[0].name]
    events = _chrome_trace(traces[0])["traceEvents"]
    assert any(e.get("cat") == "cpu_op" and e.get("name") == "aten::addmm" for e in events)
    assert "--nvtx: no CUDA device" in out.stderr  # said, and nothing installed on the CPU
    with (tmp_path / "sc" / "scalars-rank0.csv").open(encoding="utf-8") as fh:
        rows = list(csv.DictReader(fh))
    assert tuple(rows[0]) == COLUMNS and [int(r["step"]) for r in rows] == list(range(16))
    assert all(float(r["step_ms"]) > 0 and float(r["samples_per_s"]) > 0 and r["loss"] for r in rows)
    assert rows[0]["gpu_util_pct"] == "" and rows[0]["mem_allocated_mib"] == ""  # not measured on a CPU
    if _has_tensorboard():
        from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

        acc = EventAccumulator(str(tmp_path / "sc" / "rank0"))
        acc.Reload()
        losses = [e.value for e in acc.Scalars("gpudoctor/loss")]
        assert [e.step for e in acc.Scalars("gpudoctor/step_ms")] == list(range(16))
        assert losses == pytest.approx([float(r["loss"]) for r in rows], rel=1e-6)


def _has_tensorboard() -> bool:
    try:
        import tensorboard  # noqa: F401
    except ImportError:
        return False
    return True


def test_run_refuses_existing_scalars_and_contradicting_options(tmp_path: Path) -> None:
    (tmp_path / "train.py").write_text(SCRIPT, encoding="utf-8")
    (tmp_path / "sc").mkdir()
    (tmp_path / "sc" / "scalars-rank0.csv").write_text("mine\n", encoding="utf-8")
    out = gpudoctor("run", "--scalars", "sc", "python", "train.py", cwd=tmp_path)
    assert out.returncode == 2 and "already holds step scalars" in out.stderr
    assert (tmp_path / "sc" / "scalars-rank0.csv").read_text(encoding="utf-8") == "mine\n"
    out = gpudoctor("run", "--trace-dir", "t", "--no-profile", "python", "train.py", cwd=tmp_path)
    assert out.returncode == 2 and "--trace-dir needs the profiler window" in out.stderr
    out = gpudoctor("run", "--trace-dir", "t", "--try", "pin_memory", "python", "train.py", cwd=tmp_path)
    assert out.returncode == 2 and "without --try" in out.stderr
    assert not (tmp_path / "t").exists()


def test_watch_writes_the_trace_folder_in_process(tmp_path: Path) -> None:
    with gd.watch(steps=10, run_dir=tmp_path / "run", trace_dir=tmp_path / "tr", sample=False, quiet=True):
        _loop(12)
    (trace,) = sorted((tmp_path / "tr").iterdir())
    assert TRACE_NAME.fullmatch(trace.name)
    assert any(e.get("cat") == "cpu_op" for e in _chrome_trace(trace)["traceEvents"])


class FakeNvtx:
    def __init__(self) -> None:
        self.calls: list[str] = []

    def range_push(self, name: str) -> None:
        self.calls.append(f"push {name}")

    def range_pop(self) -> None:
        self.calls.append("pop")


def test_nvtx_ranges_wrap_steps_optimizer_steps_and_data_waits(tmp_path: Path, monkeypatch) -> None:
    fake = FakeNvtx()
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "nvtx", fake)
    with gd.watch(steps=2, run_dir=tmp_path / "run", profile=False, sample=False, nvtx=True, quiet=True):
        _loop(4)  # two steps observed, two more inside the block after the watch ended
    step = ["push data wait", "pop", "push optimizer.step", "pop", "pop"]
    after = ["pop"]  # the third step closes the open step range and opens none; then nothing
    assert fake.calls == ["push gpudoctor step 0", *step, "push gpudoctor step 1", *step,
                          "push gpudoctor step 2", *after]
    assert fake.calls.count("pop") == sum(c.startswith("push") for c in fake.calls)  # balanced
    assert wrappers_in_place() == []  # the DataLoader wrapper came out with the probes
    calls = len(fake.calls)
    _loop(2)  # after the watch: no range is pushed any more
    assert len(fake.calls) == calls


def test_nvtx_without_cuda_installs_nothing_and_says_so() -> None:
    handles: list = []
    note = nvtx.install(handles) if not torch.cuda.is_available() else "skip"
    if note == "skip":
        pytest.skip("a CUDA device is present")
    assert note == "--nvtx: no CUDA device, no NVTX ranges" and handles == [] and wrappers_in_place() == []


def test_the_engine_observer_writes_scalars_per_step(tmp_path: Path) -> None:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 3))
    data = TensorDataset(torch.randn(64, 8), torch.randint(0, 3, (64,)))
    obs = ScalarsObserver(tmp_path / "sc", tensorboard=False)
    Trainer(model, torch.optim.SGD(model.parameters(), lr=0.1), torch.nn.CrossEntropyLoss(),
            config=presets.cpu_debug(), observers=[obs]).fit(DataLoader(data, batch_size=8), epochs=1)
    with (tmp_path / "sc" / "scalars-rank0.csv").open(encoding="utf-8") as fh:
        rows = list(csv.DictReader(fh))
    assert [int(r["step"]) for r in rows] == list(range(8))
    assert all(float(r["loss"]) > 0 and float(r["samples_per_s"]) > 0 for r in rows)
    assert not (tmp_path / "sc" / "rank0").exists()  # tensorboard=False: CSV only


def test_gpu_utilisation_is_the_last_sample_of_the_rank_gpu_before_the_step_end() -> None:
    samples = [GpuSample(timestamp_s=t, index=i, name="g", util_gpu_pct=u)
               for t, i, u in ((1.0, 0, 10.0), (1.0, 1, 99.0), (2.0, 0, 20.0), (3.0, 0, 30.0))]
    assert gpu_util_at(samples, 0, 2.5) == 20.0
    assert gpu_util_at(samples, 1, 2.5) == 99.0
    assert gpu_util_at(samples, 0, 0.5) is None and gpu_util_at(samples, None, 9.0) is None
