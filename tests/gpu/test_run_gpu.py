"""``gpudoctor run`` on a real GPU: device figures the CPU tests cannot see.

Runs with ``pytest -m gpu tests/gpu/test_run_gpu.py``. One small conv-net script with switches
plants each behaviour the probes must catch: pageable vs pinned copies, ``.item()`` every step, NaN loss,
fp16 GradScaler, bf16 autocast.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.cli_runner import env
from tests.support.gpu import need_gpu

SRC = Path(__file__).resolve().parents[2] / "src"
sys.path.insert(0, str(SRC))

SCRIPT = """
import sys, torch
from torch.utils.data import DataLoader, TensorDataset
flags = set(sys.argv[1:])
pinned = "pageable" not in flags
torch.backends.cudnn.benchmark = True
data = TensorDataset(torch.randn(2048, 3, 32, 32), torch.randint(0, 10, (2048,)))
loader = DataLoader(data, batch_size=64, shuffle=True, num_workers=2, pin_memory=pinned, drop_last=True)
model = torch.nn.Sequential(
    torch.nn.Conv2d(3, 32, 3, padding=1), torch.nn.ReLU(), torch.nn.Conv2d(32, 64, 3, padding=1),
    torch.nn.ReLU(), torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(), torch.nn.Linear(64, 10),
).cuda()
opt = torch.optim.AdamW(model.parameters(), lr=1e-3, fused=True)
scaler = torch.amp.GradScaler("cuda", init_scale=2.0**16) if "fp16" in flags else None
dtype = torch.float16 if "fp16" in flags else torch.bfloat16
for epoch in range(100):
    for x, y in loader:
        x, y = x.cuda(non_blocking=pinned), y.cuda(non_blocking=pinned)
        with torch.autocast("cuda", dtype=dtype):
            loss = torch.nn.functional.cross_entropy(model(x), y)
        if "nan" in flags:
            loss = loss * float("nan")
        opt.zero_grad(set_to_none=True)
        if scaler is not None:
            scaler.scale(loss).backward()
            scaler.step(opt)
            scaler.update()
        else:
            loss.backward()
            opt.step()
        if "item" in flags:
            print(f"loss {loss.item():.3f}")
"""


def _run(tmp: Path, *flags: str, steps: int = 30) -> tuple[subprocess.CompletedProcess, Path]:
    from gpudoctor.records.rundir import load_run  # noqa: F401 - fail early if src is not importable

    script = tmp / "train_gpu.py"
    script.write_text(SCRIPT, encoding="utf-8")
    out = tmp / ("rd-" + "-".join(flags or ("clean",)))
    result = subprocess.run(
        [sys.executable, "-m", "gpudoctor", "run", "--steps", str(steps), "--json", "--fail-on", "never", "--out", str(out),
         "--", sys.executable, str(script), *flags],
        env=env(), capture_output=True, text=True, timeout=240,
    )
    return result, out


def _load(path: Path):
    from gpudoctor.records.rundir import load_run

    return load_run(path)



gpu = pytest.mark.gpu


@gpu
def test_clean_pinned_run_has_device_figures(tmp_path: Path) -> None:
    need_gpu()
    result, out = _run(tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    run = _load(out)
    steps = run.steps[0]
    assert len(steps) == 30
    timed = [s for s in steps if s.gpu_ms is not None]
    assert len(timed) >= 25 and all(s.gpu_ms > 0 for s in timed)
    assert all(s.mem is not None and s.mem.allocated_bytes > 0 for s in steps)
    later = steps[5:]
    # x and y: 2 pinned non_blocking copies a step (a library may add a few tiny ones of its own)
    assert all(s.h2d_copies >= 2 and s.h2d_pageable_bytes == 0 and s.h2d_blocking_copies == 0 for s in later)
    assert all(s.h2d_bytes >= 64 * 3 * 32 * 32 * 4 + 64 * 8 for s in later)
    assert all(s.host_syncs == 0 for s in later), [s.host_syncs for s in later]
    assert all(s.loss_finite is True and s.loss is not None for s in steps)
    config = run.configs[0]
    assert config.device == "cuda:0" and config.cuda_device_index == 0 and config.device_name
    assert config.autocast_dtypes == ("bfloat16",) and config.cudnn_benchmark is True
    assert config.optimizer == "AdamW" and config.optimizer_fused is True
    window = run.windows[0]
    assert window.gpu_busy_frac is not None and 0 < window.gpu_busy_frac <= 1
    assert window.kernel_count > 0 and window.launch_count > 0 and window.top_kernels
    assert any(m.kind == "HtoD" and m.pinned is True for m in window.memcpy)


@gpu
def test_pageable_copies_and_item_syncs_are_counted(tmp_path: Path) -> None:
    need_gpu()
    result, out = _run(tmp_path, "pageable", "item")
    assert result.returncode == 0, result.stderr[-3000:]
    steps = _load(out).steps[0][5:]
    assert all(s.h2d_pageable_bytes == s.h2d_bytes > 0 and s.h2d_blocking_copies == 2 for s in steps)
    assert all(s.host_syncs >= 1 for s in steps)
    window = _load(out).windows[0]
    assert any(m.kind == "HtoD" and m.pinned is False for m in window.memcpy)


@gpu
def test_nan_loss_and_grad_scaler(tmp_path: Path) -> None:
    need_gpu()
    result, out = _run(tmp_path, "fp16", "nan", steps=20)
    assert result.returncode == 0, result.stderr[-3000:]
    run = _load(out)
    steps = run.steps[0]
    assert len(steps) == 20  # skipped optimizer steps still count as steps
    assert all(s.loss_finite is False for s in steps)
    assert all(s.scaler_skipped is True for s in steps)
    scales = [s.scaler_scale for s in steps if s.scaler_scale is not None]
    assert len(scales) >= 15 and scales[-1] < scales[0]  # the scale collapses
    assert run.configs[0].grad_scaler is True and run.configs[0].autocast_dtypes == ("float16",)


@gpu
def test_try_tf32_knob_reaches_the_script(tmp_path: Path) -> None:
    need_gpu()
    script = tmp_path / "train_gpu.py"
    script.write_text(SCRIPT, encoding="utf-8")
    result = subprocess.run(
        [sys.executable, "-m", "gpudoctor", "run", "--steps", "20", "--no-profile", "--json", "--fail-on", "never",
         "--try", "tf32,expandable_segments", "--out", str(tmp_path / "try"), "--", sys.executable, str(script)],
        env=env(), capture_output=True, text=True, timeout=240,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    payload = json.loads(result.stdout)
    assert payload["comparison"]["gain"] is not None
    tried = _load(tmp_path / "try" / "try").configs[0]
    assert tried.tf32_matmul is True and "expandable_segments:True" in tried.alloc_conf
