"""gpudoctor.train on a real GPU: bf16/fp16 steps, no host syncs in steady state, real OOM recovery,
the stream prefetcher and the GPU-resident loader. Run with ``pytest -m gpu tests/gpu/test_train_gpu.py``."""

from __future__ import annotations

import warnings

import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from gpudoctor.train import (
    CudaPrefetcher,
    GpuLoader,
    LogConfig,
    PrecisionConfig,
    Trainer,
    TrainConfig,
    fast_loader,
    presets,
)

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]


def _model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(64, 256), nn.ReLU(), nn.Linear(256, 10))


def _gpu_batches(n: int = 32, batch: int = 64):
    g = torch.Generator(device="cuda").manual_seed(0)
    return [(torch.randn(batch, 64, device="cuda", generator=g), torch.randint(0, 10, (batch,), device="cuda",
                                                                                  generator=g)) for _ in range(n)]


class _Records:
    def __init__(self) -> None:
        self.records = []

    def on_run_start(self, info):
        pass

    def on_step_end(self, record):
        self.records.append(record)

    def on_run_end(self, n):
        pass


def _quiet(**changes) -> TrainConfig:
    return TrainConfig(log=LogConfig(progress_bar=False, flops_per_sample=1.0)).replace(**changes)


def test_bf16_training_learns_and_records_gpu_time():
    model, rec = _model(), _Records()
    data = _gpu_batches() * 4
    result = Trainer(model, torch.optim.AdamW(model.parameters(), lr=3e-3), nn.CrossEntropyLoss(),
                     config=_quiet(), observers=[rec]).fit(data, epochs=1)
    assert result.precision == "bf16" and result.steps == 128
    assert rec.records[-1].loss < rec.records[0].loss
    assert all(r.gpu_ms is not None and r.gpu_ms > 0 and r.mem is not None for r in rec.records)
    assert result.mfu is not None  # the spec table knows this GPU (else this says which one is missing)


def test_no_host_sync_in_steady_state_steps():
    """After warm-up, a bf16 step must not synchronise the host with the GPU."""
    model = _model()
    caught = []

    class SyncWatch(_Records):
        def on_step_end(self, record):
            super().on_step_end(record)
            # the end of the warm-up (log.warmup_steps=3) is one sync on purpose: the steady-state
            # clock starts where the GPU is; from step 4 on, no syncs
            if record.step == 4:
                torch.cuda.set_sync_debug_mode("warn")
            elif record.step == 25:  # stop before the end-of-run flush, which waits on purpose
                torch.cuda.set_sync_debug_mode(0)

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            Trainer(model, torch.optim.AdamW(model.parameters(), lr=1e-3, fused=True), nn.CrossEntropyLoss(),
                    config=_quiet(max_steps=30), observers=[SyncWatch()]).fit(_gpu_batches(), epochs=1)
        finally:
            torch.cuda.set_sync_debug_mode(0)
    # torch warns once that the debug mode is a prototype; only "called a synchronizing CUDA
    # operation" warnings are syncs
    syncs = [str(w.message) for w in caught if "synchronizing cuda operation" in str(w.message).lower()]
    assert not syncs, syncs[:3]


def test_fp16_scaler_skips_steps_and_scheduler_follows():
    model = _model()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 1.0)
    rec = _Records()
    cfg = _quiet(precision=PrecisionConfig(dtype="fp16", init_scale=2.0**40, growth_interval=1000))
    result = Trainer(model, opt, nn.CrossEntropyLoss(), config=cfg, scheduler=sched, observers=[rec]).fit(
        _gpu_batches(), epochs=1)
    assert result.skipped_steps > 0  # 2^40 overflows fp16 gradients until the scale backs off
    assert sched.last_epoch == result.steps - result.skipped_steps
    assert sum(bool(r.scaler_skipped) for r in rec.records) == result.skipped_steps


def test_real_cuda_oom_is_recovered(tmp_path):
    from gpudoctor.core.memory_history import history_enabled
    from gpudoctor.train import RobustConfig

    class Hungry(nn.Module):
        def __init__(self):
            super().__init__()
            self.inner = _model()

        def forward(self, x):
            if x.shape[0] > 16:  # ask the allocator for far more than any GPU has: a real OOM
                torch.empty(x.shape[0] * 2**40, dtype=torch.uint8, device=x.device)
            return self.inner(x)

    model = Hungry()
    with pytest.warns(RuntimeWarning, match="retrying") as caught:
        result = Trainer(model, torch.optim.SGD(model.parameters(), lr=0.01), nn.CrossEntropyLoss(),
                         config=_quiet(robust=RobustConfig(oom_dir=str(tmp_path)))).fit(_gpu_batches(8), epochs=1)
    assert result.micro_batch_split == 4 and result.steps == 8
    # robust.oom_snapshot="on_oom" (default): the OOMs were written, with history after the first
    messages = [str(w.message) for w in caught if "retrying" in str(w.message)]
    assert "recording allocation history" in messages[0] and str(tmp_path / "oom-rank0.json") in messages[0]
    assert (tmp_path / "oom-rank0.json").is_file() and (tmp_path / "oom-snapshot-rank0.pickle").is_file()
    assert not history_enabled()  # the recording it started ended with fit


def test_prefetcher_yields_the_loaders_batches_on_the_gpu():
    ds = TensorDataset(torch.randn(256, 64), torch.arange(256))
    loader = DataLoader(ds, batch_size=32, pin_memory=True)
    got = [(x, y) for x, y in CudaPrefetcher(loader, torch.device("cuda"))]
    assert all(x.is_cuda for x, _ in got)
    assert torch.equal(torch.cat([y for _, y in got]).cpu(), torch.arange(256))


def test_fast_loader_plus_prefetch_trains_from_a_dataset():
    ds = TensorDataset(torch.randn(512, 64), torch.randint(0, 10, (512,)))
    model = _model()
    result = Trainer(model, torch.optim.SGD(model.parameters(), lr=0.01), nn.CrossEntropyLoss(),
                     config=_quiet(batch_size=64)).fit(ds, epochs=2)
    assert result.steps == 16 and fast_loader(ds, 64).pin_memory


def test_gpu_loader_convnet_compiled_channels_last():
    x = torch.randint(0, 256, (1024, 32, 32, 3), dtype=torch.uint8)
    y = torch.randint(0, 10, (1024,))
    loader = GpuLoader(x, y, 128, torch.device("cuda"))
    model = nn.Sequential(nn.Conv2d(3, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(), nn.AdaptiveAvgPool2d(1),
                          nn.Flatten(), nn.Linear(16, 10))
    cfg = presets.convnet_bf16().replace(log=LogConfig(progress_bar=False))
    cfg = cfg.replace(perf=cfg.perf.__class__(channels_last=True, compile=True))
    result = Trainer(model, torch.optim.SGD(model.parameters(), lr=0.05), nn.CrossEntropyLoss(),
                     config=cfg).fit(loader, epochs=2)
    assert result.steps == 16 and result.flops_per_sample and result.flops_per_sample > 0


def test_compiled_forward_and_loss_keep_no_fp32_copy_of_the_logits():
    """A language model's logits (8 x 256 x 50,304) in bf16: compiled together with the loss, the
    step's peak memory stays below the old path's (loss outside the graph on an fp32 copy) by at
    least most of that copy (412 MB)."""
    vocab, batch, seq = 50304, 8, 256

    class LM(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            torch.manual_seed(0)
            self.emb, self.head = nn.Embedding(vocab, 256), nn.Linear(256, vocab, bias=False)

        def forward(self, idx):
            return self.head(self.emb(idx))

    def loss_fn(logits, target):
        return nn.functional.cross_entropy(logits.view(-1, vocab), target.view(-1))

    g = torch.Generator(device="cuda").manual_seed(0)
    data = [(torch.randint(0, vocab, (batch, seq), device="cuda", generator=g),
             torch.randint(0, vocab, (batch, seq), device="cuda", generator=g)) for _ in range(4)]

    def peak(old_path: bool) -> tuple[int, float]:
        model = LM().cuda()
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3, fused=True)
        if old_path:
            compiled = torch.compile(model)
            for x, y in data:  # warm the compile, then measure the last step
                torch.cuda.reset_peak_memory_stats()
                with torch.autocast("cuda", dtype=torch.bfloat16):
                    out = compiled(x)
                loss = loss_fn(out.float(), y)
                loss.backward()
                opt.step()
                opt.zero_grad(set_to_none=True)
            return torch.cuda.max_memory_allocated(), float(loss)
        trainer = Trainer(model, opt, loss_fn, config=_quiet(perf=presets.transformer_bf16().perf,
                                                             precision=PrecisionConfig(dtype="bf16")))
        trainer.fit(data[:3], epochs=1)
        torch.cuda.reset_peak_memory_stats()
        result = trainer.fit(data[3:], epochs=1)
        return torch.cuda.max_memory_allocated(), result.train_loss

    torch._dynamo.reset()
    old_peak, old_loss = peak(old_path=True)
    torch._dynamo.reset()
    new_peak, new_loss = peak(old_path=False)
    fp32_copy = batch * seq * vocab * 4
    assert new_peak < old_peak - fp32_copy // 2, (old_peak, new_peak)
    assert new_loss == pytest.approx(old_loss, rel=0.05)
