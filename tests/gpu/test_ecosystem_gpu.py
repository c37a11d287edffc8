"""Issue 20's H200 bars: the trace folder opens with kernels in it; ``gpudoctor.watch`` in a
notebook-style script names a planted data-loader problem; and the CI helpers, scalars and NVTX
on a real device.

Runs with ``pytest -m gpu tests/gpu/test_ecosystem_gpu.py``.
"""

from __future__ import annotations

import csv
import gzip
import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.cli_runner import env
from tests.support.gpu import need_gpu

ROOT = Path(__file__).resolve().parents[2]
SRC = ROOT / "src"
sys.path.insert(0, str(SRC))

SCRIPT = """
import torch
from torch.utils.data import DataLoader, TensorDataset
data = TensorDataset(torch.randn(4096, 3, 32, 32), torch.randint(0, 10, (4096,)))
loader = DataLoader(data, batch_size=128, shuffle=True, num_workers=2, pin_memory=True, drop_last=True)
model = torch.nn.Sequential(
    torch.nn.Conv2d(3, 64, 3, padding=1), torch.nn.ReLU(), torch.nn.Conv2d(64, 64, 3, padding=1),
    torch.nn.ReLU(), torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(), torch.nn.Linear(64, 10),
).cuda()
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
for epoch in range(100):
    for x, y in loader:
        x, y = x.cuda(non_blocking=True), y.cuda(non_blocking=True)
        loss = torch.nn.functional.cross_entropy(model(x), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
"""




gpu = pytest.mark.gpu


@gpu
def test_trace_dir_opens_as_a_chrome_trace_with_kernels_and_scalars_have_gpu_figures(tmp_path: Path) -> None:
    need_gpu()
    (tmp_path / "train.py").write_text(SCRIPT, encoding="utf-8")
    result = subprocess.run(
        [sys.executable, "-m", "gpudoctor", "run", "--steps", "30", "--json", "--fail-on", "never",
         "--out", str(tmp_path / "run"), "--trace-dir", str(tmp_path / "traces"), "--scalars",
         str(tmp_path / "scalars"), "--nvtx", "--", sys.executable, str(tmp_path / "train.py")],
        env=env(), capture_output=True, text=True, timeout=300, check=False, cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    payload = json.loads(result.stdout)
    (trace,) = sorted((tmp_path / "traces").glob("*_rank0.*.pt.trace.json.gz"))
    assert payload["traces"] == [str(trace)]
    with gzip.open(trace, "rt", encoding="utf-8") as fh:
        events = json.load(fh)["traceEvents"]
    kernels = [e for e in events if e.get("cat") == "kernel"]
    print(f"trace {trace.name}: {len(events)} events, {len(kernels)} kernels")
    assert len(kernels) > 50, len(kernels)
    assert any(e.get("cat") == "gpu_memcpy" for e in events)
    with (tmp_path / "scalars" / "scalars-rank0.csv").open(encoding="utf-8") as fh:
        rows = list(csv.DictReader(fh))
    assert len(rows) == 30
    assert all(float(r["mem_allocated_mib"]) > 0 for r in rows)
    assert sum(r["gpu_util_pct"] != "" for r in rows) >= 20
    assert sum(r["gpu_ms"] != "" for r in rows) >= 25
    try:
        from hta.trace_analysis import TraceAnalysis
    except ImportError:
        return  # Holistic Trace Analysis is not installed here
    analysis = TraceAnalysis(trace_dir=str(tmp_path / "traces"))
    assert 0 in analysis.t.traces


@gpu
def test_watch_in_a_notebook_style_script_names_the_planted_data_loader(tmp_path: Path) -> None:
    need_gpu()
    script = ROOT / "docs" / "examples" / "watch_notebook.py"
    result = subprocess.run([sys.executable, str(script), str(tmp_path / "nb")], env=env(), cwd=tmp_path,
                            capture_output=True, text=True, timeout=300, check=False)
    assert result.returncode == 0, result.stderr[-3000:]
    lines = result.stdout.splitlines()
    print("\n".join(lines[:6]))
    assert lines[0].startswith("trained 40 steps; observed stopped")
    findings = [line.split()[1] for line in lines[1:] if line.split()[:1] in (["warn"], ["error"])]
    assert findings[:1] == ["GD-RUN-DATALOADER"], lines[:6]  # the first problem named is the loader
    from gpudoctor.records.rundir import load_run

    run = load_run(tmp_path / "nb")
    assert run.configs[0].device == "cuda:0"
    assert run.windows[0].kernel_count > 0  # the profiler window ran in the notebook's own process
    assert run.gpu, "the NVML sampler ran in-process"


@gpu
def test_the_ci_helpers_on_cuda(tmp_path: Path) -> None:
    need_gpu()
    import torch

    from gpudoctor.testing import assert_no_leak, assert_no_sync

    model = torch.nn.Linear(256, 1000).cuda()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    x = torch.randn(512, 256, device="cuda")
    y = torch.randint(0, 1000, (512,), device="cuda")
    kept = []

    def step(read: bool = False, keep: bool = False) -> None:
        out = model(x)
        loss = torch.nn.functional.cross_entropy(out, y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        if read:
            loss.item()
        if keep:
            kept.append(out)

    assert_no_sync(step, steps=3)
    try:
        assert_no_sync(lambda: step(read=True), steps=3)
    except AssertionError as exc:
        assert "synchronizing CUDA operation" in str(exc), str(exc)
    else:
        raise AssertionError("a .item() per step was not caught on CUDA")
    assert torch.cuda.get_sync_debug_mode() == 0
    assert_no_leak(step, steps=20)
    try:
        assert_no_leak(lambda: step(keep=True), steps=20)
    except AssertionError as exc:
        assert "CUDA memory allocated" in str(exc), str(exc)
    else:
        raise AssertionError("2 MB of kept logits per step was not caught on CUDA")
    example = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "gpudoctor.testing", "-p", "no:cacheprovider",
         str(ROOT / "docs" / "examples" / "test_step_hygiene.py")],
        env=env(), cwd=tmp_path, capture_output=True, text=True, timeout=300, check=False)
    assert example.returncode == 0 and "4 passed" in example.stdout, example.stdout[-3000:]
