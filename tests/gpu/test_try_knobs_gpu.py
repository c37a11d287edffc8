"""``gpudoctor run --try`` model knobs on a real GPU: what the CPU tests cannot see.

Runs with ``pytest -m gpu tests/gpu/test_try_knobs_gpu.py``. The headline: ``--try bf16`` on the fp32 conv net
workload (``gpudoctor.workloads.fp32_convnet``, GPU-bound in plain fp32) measures a gain above
the run-to-run noise and says "apply it"; it prints the figures for the results table.
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

# A user's loop: pinned batches copied without non_blocking, a conv net, clipping, plain fp32.
SCRIPT = """
import torch
from torch.utils.data import DataLoader, TensorDataset
data = TensorDataset(torch.randn(4096, 3, 64, 64), torch.randint(0, 10, (4096,)))
loader = DataLoader(data, batch_size=128, shuffle=True, num_workers=2, pin_memory=True, drop_last=True)
model = torch.nn.Sequential(
    torch.nn.Conv2d(3, 64, 3, padding=1), torch.nn.BatchNorm2d(64), torch.nn.ReLU(),
    torch.nn.Conv2d(64, 128, 3, padding=1), torch.nn.BatchNorm2d(128), torch.nn.ReLU(),
    torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(), torch.nn.Linear(128, 10),
).cuda()
opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
for epoch in range(100):
    for x, y in loader:
        x, y = x.cuda(), y.cuda()
        loss = torch.nn.functional.cross_entropy(model(x), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
"""




gpu = pytest.mark.gpu


def _one_run(tmp: Path, knobs: str, steps: int = 30):
    """One instrumented run of SCRIPT with ``knobs``; its records."""
    from gpudoctor.collectors.knobs import parse_knobs
    from gpudoctor.collectors.launch import RunSpec, run_instrumented
    from gpudoctor.records.rundir import load_run

    script = tmp / "train_gpu.py"
    script.write_text(SCRIPT, encoding="utf-8")
    spec = RunSpec(command=(sys.executable, str(script)), run_dir=tmp / f"rd-{knobs}", steps=steps,
                   profile=False, knobs=parse_knobs(knobs), echo_child=False, sample_gpu=False)
    outcome = run_instrumented(spec, say=lambda message: None)
    assert outcome.exit_code == 0, (tmp / f"rd-{knobs}" / "stdout.log").read_text()[-3000:]
    return load_run(tmp / f"rd-{knobs}")


@gpu
def test_bf16_on_the_fp32_convnet_is_measured_above_the_noise(tmp_path: Path) -> None:
    need_gpu()
    result = subprocess.run(
        [sys.executable, "-m", "gpudoctor", "run", "--json", "--fail-on", "never", "--try", "bf16",
         "--out", str(tmp_path / "rd"),
         "--", sys.executable, "-m", "gpudoctor.workloads.fp32_convnet", "--size", "medium", "--steps", "1000"],
        env=env(), capture_output=True, text=True, timeout=580,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    comparison = json.loads(result.stdout)["comparison"]
    judgement = comparison["judgement"]
    print(f"bf16 on fp32_convnet medium: gain {judgement['gain']:+.1%} noise {judgement['noise']:.1%} "
          f"baseline {judgement['baseline']} try {judgement['tried']} verdict {judgement['verdict']}")
    assert judgement["verdict"] == "faster" and judgement["gain"] > 0.2
    assert any(n.startswith("bf16: autocast('cuda', bfloat16)") for n in comparison["notes"])


@gpu
def test_fp16_channels_last_non_blocking_on_a_gpu_loop(tmp_path: Path) -> None:
    need_gpu()
    run = _one_run(tmp_path, "fp16,channels_last,non_blocking")
    config = run.configs[0]
    assert config.autocast_dtypes == ("float16",) and config.grad_scaler is True
    assert config.channels_last is True
    assert not any("not applied" in n for n in config.knob_notes), config.knob_notes
    steady = run.steps[0][5:]
    assert all(s.h2d_blocking_copies == 0 and s.h2d_copies == 2 for s in steady)  # non_blocking reached .cuda()
    assert all(s.loss_finite for s in steady) and all(s.scaler_scale for s in steady[:-1])


@gpu
def test_compile_and_bf16_together(tmp_path: Path) -> None:
    need_gpu()
    run = _one_run(tmp_path, "compile,bf16", steps=40)
    config = run.configs[0]
    assert config.compiled is True and config.autocast_dtypes == ("bfloat16",)
    steps = run.steps[0]
    assert all(s.loss_finite for s in steps)
    late = sorted(s.step_ms for s in steps[20:])
    assert late[len(late) // 2] < steps[1].step_ms / 5  # compiled steps are far faster than the compiling one
