"""Forward and loss as one function: same losses as the old path (loss on an fp32 copy of the
outputs), the loss inside the compiled graph, and no fp32 copy of the outputs in eager mode."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from gpudoctor.train import Engine, PerfConfig, PrecisionConfig, Trainer
from gpudoctor.train.precision import to_fp32

from helpers_train import Recorder, cpu_config

VOCAB, SEQ = 64, 8


class TinyLM(nn.Module):
    """Embedding -> MLP -> vocabulary logits (batch, seq, vocab): a language model's output shape."""

    def __init__(self, seed: int = 0) -> None:
        super().__init__()
        torch.manual_seed(seed)
        self.emb = nn.Embedding(VOCAB, 32)
        self.mlp = nn.Sequential(nn.Linear(32, 64), nn.GELU(), nn.Linear(64, 32))
        self.head = nn.Linear(32, VOCAB)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        x = self.emb(idx)
        return self.head(x + self.mlp(x))


def lm_loss(logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    return nn.functional.cross_entropy(logits.reshape(-1, logits.size(-1)), target.reshape(-1))


def lm_batches(n: int = 6, batch: int = 4) -> list[tuple[torch.Tensor, torch.Tensor]]:
    g = torch.Generator().manual_seed(3)
    return [(torch.randint(0, VOCAB, (batch, SEQ), generator=g), torch.randint(0, VOCAB, (batch, SEQ), generator=g))
            for _ in range(n)]


def old_path_losses(dtype: str) -> list[float]:
    """What the engine computed before: autocast forward, then the loss on an fp32 copy, outside."""
    model = TinyLM()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    cast = torch.autocast("cpu", dtype=torch.bfloat16) if dtype == "bf16" else torch.autocast("cpu", enabled=False)
    torch.manual_seed(0)
    losses = []
    for x, y in lm_batches():
        with cast:
            out = model(x)
        loss = lm_loss(to_fp32(out), y)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        losses.append(loss.item())
    return losses


def engine_losses(dtype: str, compile: bool = False) -> list[float]:
    model, rec = TinyLM(), Recorder()
    cfg = cpu_config(precision=PrecisionConfig(dtype=dtype), perf=PerfConfig(compile=compile))
    Trainer(model, torch.optim.AdamW(model.parameters(), lr=1e-2), lm_loss, config=cfg, observers=[rec]).fit(
        lm_batches(), epochs=1)
    return rec.losses


def test_fp32_losses_are_the_old_ones_bit_for_bit():
    assert engine_losses("fp32") == old_path_losses("fp32")


def test_bf16_losses_match_the_old_path():
    # autocast computes cross_entropy in fp32 itself: the same maths without the copy
    assert engine_losses("bf16") == pytest.approx(old_path_losses("bf16"), rel=1e-3)


def test_eager_bf16_hands_the_loss_the_models_own_outputs_and_returns_fp32():
    seen = []

    def loss_fn(out, target):
        seen.append(out.dtype)
        return lm_loss(out, target)

    engine = Engine(cpu_config(precision=PrecisionConfig(dtype="bf16")))
    engine.setup(TinyLM(), None)
    x, y = lm_batches(1)[0]
    loss = engine.forward_loss(loss_fn, x, y)
    assert seen == [torch.bfloat16]  # no fp32 copy of the logits made before the loss
    assert loss.dtype == torch.float32 and loss.dim() == 0


def test_compile_traces_model_and_loss_as_one_graph(monkeypatch):
    graphs = []

    def backend(gm, example_inputs):
        graphs.append(gm)
        return gm.forward

    real_compile = torch.compile
    monkeypatch.setattr(torch, "compile", lambda fn, mode=None: real_compile(fn, backend=backend))
    losses = engine_losses("bf16", compile=True)
    assert len(graphs) == 1  # one graph for all the steps: no break between model and loss
    code = graphs[0].code
    assert "cross_entropy" in code and "embedding" in code  # the loss is inside the model's graph
    assert losses == pytest.approx(engine_losses("bf16"), rel=1e-3)


def test_inductor_compiled_losses_match_eager(monkeypatch):
    # the real compiler (inductor, C++ on the CPU): same losses as eager within float rounding
    import torch._inductor.config as inductor_config

    monkeypatch.setattr(inductor_config, "compile_threads", 1)  # no worker pool left behind
    torch._dynamo.reset()
    assert engine_losses("fp32", compile=True) == pytest.approx(engine_losses("fp32"), rel=1e-4, abs=1e-5)
