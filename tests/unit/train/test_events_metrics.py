"""Step events, metrics and the end-of-run summary."""

from __future__ import annotations

import torch
from torch import nn

from gpudoctor.records.base import read_jsonl
from gpudoctor.records.rundir import KIND_STEPS
from gpudoctor.records.step import StepRecord
from gpudoctor.train import JsonlObserver, Trainer
from gpudoctor.train.metrics import FitResult, count_flops, format_summary, lr_scale_factor, mfu
from gpudoctor.train.precision import Precision
from gpudoctor.train.config import PrecisionConfig

from helpers_train import cpu_config, tiny_loader, tiny_model


def test_jsonl_observer_writes_step_records(tmp_path):
    model = tiny_model()
    Trainer(model, torch.optim.SGD(model.parameters(), lr=0.1), nn.CrossEntropyLoss(), config=cpu_config(),
            observers=[JsonlObserver(tmp_path)]).fit(tiny_loader(), epochs=1)
    records = list(read_jsonl(tmp_path / "steps-rank0.jsonl", StepRecord, kind=KIND_STEPS))
    assert [r.step for r in records] == list(range(8))
    assert all(r.loss is not None and r.step_ms >= r.data_wait_ms >= 0 and r.gpu_ms is None for r in records)


def test_count_flops_of_a_linear_layer():
    layer = nn.Linear(8, 4, bias=False)
    x = torch.randn(2, 8)
    flops = count_flops(lambda: layer(x).sum().backward())
    assert flops == 2 * (2 * 2 * 8 * 4)  # forward + grad weight (the input needs no gradient)


def test_mfu_and_lr_scale():
    assert mfu(1e9, 100.0, torch.device("cpu"), "bf16") == (None, "MFU needs a GPU")
    assert lr_scale_factor("linear", 1024, 256) == 4.0 and lr_scale_factor("sqrt", 1024, 256) == 2.0
    assert lr_scale_factor("none", 1024, 256) == 1.0


class _FakeScaler:
    def __init__(self, log, skip):
        self.log, self.skip, self.scale = log, skip, 1024.0

    def is_enabled(self):
        return True

    def unscale_(self, opt):
        self.log.append("unscale_")

    def get_scale(self):
        return self.scale

    def step(self, opt):
        self.log.append("step")

    def update(self):
        self.log.append("update")
        if self.skip:
            self.scale /= 2


def test_precision_step_order_and_skip_report(monkeypatch):
    log = []
    model = nn.Linear(2, 2)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    monkeypatch.setattr(torch.nn.utils, "clip_grad_norm_", lambda *a, **k: log.append("clip"))
    for skip in (False, True):
        log.clear()
        precision = Precision(PrecisionConfig(dtype="fp32", grad_clip_norm=1.0), torch.device("cpu"))
        precision.scaler = _FakeScaler(log, skip)
        assert precision.step(opt, model.parameters()) is (not skip)
        assert log == ["unscale_", "clip", "step", "update"]


def test_summary_golden(golden):
    result = FitResult(
        steps=1000, epochs_completed=10, samples=512000, elapsed_s=12.34, samples_per_s=41490.0,
        global_batch=2048, per_device_batch=512, grad_accum_steps=2, world_size=2, precision="bf16",
        strategy="ddp", micro_batch_split=2, skipped_steps=1, resumed_from_step=400, train_loss=0.4321,
        val_loss=None, flops_per_sample=1.7e9, mfu=0.4123, mfu_reason=None, lr_scale=2.0, stopped_reason=None,
        overall_samples_per_s=38012.0, steady_steps=597, warmup_steps=3, startup_s=2.81, first_batch_s=0.62)
    # a run too short for a steady state: the whole-run rate, said so
    no_gpu = FitResult(**{**{f: getattr(result, f) for f in result.__dataclass_fields__}, "mfu": None,
                          "mfu_reason": "MFU needs a GPU", "resumed_from_step": None,
                          "stopped_reason": "max_steps=3 reached", "lr_scale": 1.0, "steps": 3,
                          "steady_steps": 0, "startup_s": None, "samples_per_s": 1239.0,
                          "overall_samples_per_s": 1239.0})
    golden("train/summary.txt", format_summary(result) + "---\n" + format_summary(no_gpu))
