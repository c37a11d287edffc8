"""``gpudoctor tune`` on a real GPU: real CUDA OOMs in trials, the batch boundary (narrowed around
the limit the probes' peak memory predicts), the CUDA-only knobs.

    python -m pytest -m gpu tests/gpu/test_tune_gpu.py
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch
from torch import nn
from torch.utils.data import TensorDataset

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "src"))

from gpudoctor.records.tune import TrialVerdict  # noqa: E402
from gpudoctor.train import TrainConfig  # noqa: E402
from gpudoctor.tune.session import TuneContext, TuneOptions, tune  # noqa: E402
from gpudoctor.tune.target import LoaderSettings, TuneTarget  # noqa: E402
from gpudoctor.tune.trials import TrialRunner  # noqa: E402

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]

PER_SAMPLE = 2**26  # floats kept for the backward pass per sample: 256 MiB


class Hungry(nn.Module):
    """Keeps ``PER_SAMPLE`` floats per sample alive for the backward pass: memory grows with the
    batch like activations do, and a large enough batch raises a real CUDA OOM."""

    def __init__(self) -> None:
        super().__init__()
        self.w = nn.Parameter(torch.ones(1))
        self.head = nn.Linear(8, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        big = x.new_ones(x.shape[0], PER_SAMPLE) * self.w  # saved for w's gradient
        return self.head(x) + big[:, :1] * 0 + big.mean(1, keepdim=True) * 0


def hungry_target() -> TuneTarget:
    g = torch.Generator().manual_seed(0)
    data = TensorDataset(torch.randn(4096, 8, generator=g), torch.randint(0, 3, (4096,), generator=g))
    return TuneTarget(model_factory=Hungry, optimizer_factory=lambda p: torch.optim.SGD(p, lr=0.01),
                      loss_fn=nn.CrossEntropyLoss(), train_dataset=data, eval_dataset=data,
                      config=TrainConfig(batch_size=8), loader=LoaderSettings(num_workers=0))


REF = f"{Path(__file__).resolve()}:hungry_target"


def test_real_cuda_oom_does_not_break_the_next_trial() -> None:
    target = hungry_target()
    runner = TrialRunner(target, REF, isolation="inline")
    ctx = TuneContext(target, runner, TuneOptions(steps=2, warmup=1), device=torch.device("cuda", 0))
    # A first small trial creates what stays for the process (cuBLAS/cuBLASLt workspaces, counted
    # by memory_allocated: 65 MiB on an H200); the OOMed trial must add nothing to that.
    first = runner.run(ctx.spec("batch", "batch=4", {}, batch_size=4))
    assert first.verdict is TrialVerdict.OK, first.reason
    before = torch.cuda.memory_allocated()
    huge = runner.run(ctx.spec("batch", "batch=4000", {}, batch_size=4000))  # ~1 TB: beyond any GPU
    assert huge.verdict is TrialVerdict.OOM, huge.reason
    small = runner.run(ctx.spec("batch", "batch=4", {}, batch_size=4))
    assert small.verdict is TrialVerdict.OK, small.reason
    assert small.peak_mem_bytes and small.peak_mem_bytes >= 4 * PER_SAMPLE * 4
    assert torch.cuda.memory_allocated() - before < 2**26  # the OOMed trial's memory was given back


def test_batch_boundary_on_the_gpu() -> None:
    result = tune(["batch"], target_ref=REF, target=hungry_target(), options=TuneOptions(steps=2, warmup=1,
                                                                                        margin=0.05))
    knob = next(k for k in result.knobs if k.knob == "batch")
    verdicts = [t.verdict for t in knob.trials]
    assert TrialVerdict.OOM in verdicts
    chosen = knob.params["batch_size"]
    free, total = torch.cuda.mem_get_info()
    assert chosen * PER_SAMPLE * 4 < total  # what it kept alive fits in the GPU
    checked = [t for t in knob.trials if t.setting.endswith(("(starting)", "(candidate)"))]
    assert checked and all(t.verdict is TrialVerdict.OK for t in checked)
    # the real GPU's peak memory drew the line that placed the limit, and the bracket is 1% wide
    assert any("train: peak memory of the probes that fit puts the limit near" in n for n in knob.notes), knob.notes
    probes = [t for t in knob.trials if t.knob == "batch" and not t.setting.endswith(")")]
    largest = max(t.params["batch_size"] for t in probes if t.verdict is TrialVerdict.OK)
    first_oom = min(t.params["batch_size"] for t in probes if t.verdict is TrialVerdict.OOM)
    assert largest < first_oom <= largest + max(1, int(largest * 0.01))


def test_cuda_only_knobs_run() -> None:
    target = hungry_target()
    small = TuneTarget(model_factory=lambda: nn.Sequential(nn.Linear(8, 64), nn.ReLU(), nn.Linear(64, 3)),
                       optimizer_factory=target.optimizer_factory, loss_fn=target.loss_fn,
                       train_dataset=target.train_dataset, config=target.config, loader=target.loader)
    result = tune(["precision", "scaler"], target_ref=REF, target=small,
                  options=TuneOptions(steps=3, warmup=1, compile=False))
    precision, scaler = (next(k for k in result.knobs if k.knob == n) for n in ("precision", "scaler"))
    ran = {t.setting: t.verdict for t in precision.trials}
    for dtype in ("fp32", "tf32", "bf16", "fp16"):
        assert ran[dtype] in (TrialVerdict.OK, TrialVerdict.REJECTED), precision.trials
    assert scaler.trials[0].verdict is TrialVerdict.OK and scaler.trials[0].scaler_scale is not None
    init = scaler.params["precision.init_scale"]
    assert init > 0 and float(init).is_integer() and (int(init) & (int(init) - 1)) == 0  # a power of two
