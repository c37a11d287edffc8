"""On a real GPU: what ``perf.deterministic`` costs the engine on a small convnet (on vs off,
median step time), and that it repeats bit for bit. Figures are printed and, with JOB_OUT set,
written to deterministic_cost.json."""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
]


class GlobalMean(torch.nn.Module):
    def forward(self, x):
        return x.mean((2, 3))  # deterministic backward (AdaptiveAvgPool2d's is not)


def gather_loss(out, target):
    """Cross-entropy through log_softmax + gather: torch lists NLLLoss on CUDA among the ops that
    raise under deterministic mode; gather's backward has a deterministic kernel."""
    return -out.float().log_softmax(-1).gather(1, target[:, None]).mean()


def convnet() -> torch.nn.Module:
    torch.manual_seed(0)
    nn = torch.nn
    return nn.Sequential(
        nn.Conv2d(3, 64, 3, padding=1), nn.BatchNorm2d(64), nn.ReLU(),
        nn.Conv2d(64, 128, 3, padding=1, stride=2), nn.BatchNorm2d(128), nn.ReLU(),
        nn.Conv2d(128, 256, 3, padding=1, stride=2), nn.BatchNorm2d(256), nn.ReLU(),
        GlobalMean(), nn.Linear(256, 10),
    )


def _train(deterministic: bool, steps: int = 120) -> tuple[list[float], list[float]]:
    """One engine run in a fresh process (CUBLAS_WORKSPACE_CONFIG must be set before CUDA starts,
    and deterministic mode is process-wide): its losses and the GPU time of steps 20+."""
    src = Path(__file__).resolve().parents[2] / "src"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in (str(src), str(Path(__file__).parent),
                                                                  os.environ.get("PYTHONPATH", "")) if p))
    env.pop("CUBLAS_WORKSPACE_CONFIG", None)
    code = f"import json, test_engine_switches_gpu as t; print(json.dumps(t.train_here({deterministic}, {steps})))"
    result = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    losses, ms = json.loads(result.stdout.strip().splitlines()[-1])
    return losses, ms


def train_here(deterministic: bool, steps: int) -> tuple[list[float], list[float]]:
    from gpudoctor.train import LogConfig, PerfConfig, Trainer, TrainConfig

    class Keep:
        def __init__(self):
            self.records = []

        def on_run_start(self, info):
            pass

        def on_step_end(self, record):
            self.records.append(record)

        def on_run_end(self, n):
            pass

    cfg = TrainConfig(device="cuda", log=LogConfig(progress_bar=False, flops_per_sample=1.0),
                      perf=PerfConfig(deterministic=deterministic, channels_last=False))
    model, keep = convnet(), Keep()
    trainer = Trainer(model, torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9), gather_loss,
                      config=cfg, observers=[keep])  # the engine starts CUDA after setting the cuBLAS variable
    g = torch.Generator(device="cuda").manual_seed(1)
    batches = [(torch.randn(256, 3, 32, 32, device="cuda", generator=g),
                torch.randint(0, 10, (256,), device="cuda", generator=g)) for _ in range(steps)]
    torch.manual_seed(0)
    trainer.fit(batches, epochs=1)
    return [r.loss for r in keep.records], [r.gpu_ms for r in keep.records[20:]]


def test_deterministic_mode_cost_and_repeatability() -> None:
    off_a, off_ms = _train(False)
    on_a, on_ms = _train(True)
    on_b, on_ms_b = _train(True)
    off_median, on_median = statistics.median(off_ms), statistics.median(on_ms + on_ms_b)
    data = {"model": "3-conv BatchNorm convnet, batch 256, 32x32, engine defaults (precision auto), SGD "
                     "momentum, cross-entropy by log_softmax+gather, 120 steps, median gpu_ms of steps 20+, "
                     "each run in its own process",
            "off_median_gpu_ms": round(off_median, 3), "on_median_gpu_ms": round(on_median, 3),
            "cost": round(on_median / off_median - 1, 4),
            "deterministic_runs_identical": on_a == on_b}
    print(json.dumps(data, indent=2))
    out = os.environ.get("JOB_OUT")
    if out:
        Path(out, "deterministic_cost.json").write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")
    assert on_a == on_b, "two deterministic runs gave different losses"
    assert len(off_a) == len(on_a) == 120
