"""One training configuration of ``benchmarks/scaling.py``, run once per rank under torchrun.

    python -m torch.distributed.run --standalone --nproc_per_node N benchmarks/scaling_worker.py \\
        --models gpt,resnet --strategies ddp,fsdp --out FILE [--quick] [--cpu]

Trains GPT-2 124M (seq 1024, 16 sequences per GPU) or ResNet-18 (CIFAR variant, 32x32, 512
images per GPU) through ``gpudoctor.train`` on synthetic batches already on the device (weak
scaling: the per-device batch stays the same at every world size). Every (strategy, model) pair
runs in turn in the same process group, so the start-up (torchrun, imports, NCCL) is paid once per
world size; a failing pair is recorded and the next one still runs, and rank 0 rewrites ``--out``
after each. With one process the engine
resolves DDP/FSDP to no wrapper: that run is the single-GPU baseline. Timing: an optimizer step
post-hook records a CUDA event after the last warm-up step and after the last timed step; the only
host sync is at the end (``Event.synchronize``). On the CPU (``--cpu``, for tests) the models are
tiny (ResNet-18 on 8x8 images) and the wall clock stands in for the events.

ResNet-18 under FSDP2 runs channels-first: FSDP2 refuses non-contiguous parameters, and the
engine's channels-last conversion makes the convolution weights non-contiguous.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from pathlib import Path

import torch
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import StepTimer, loss_is_output  # noqa: E402
from models import GPT, GPT2_124M, GPTConfig, resnet18_cifar  # noqa: E402

from gpudoctor.core.dist import destroy_distributed  # noqa: E402
from gpudoctor.train import LogConfig, ParallelConfig, PrecisionConfig, Trainer, presets  # noqa: E402
from gpudoctor.records.atomic import write_text_atomic  # noqa: E402

GPT_TINY = GPTConfig(n_layer=2, n_head=2, n_embd=32, vocab_size=128, block_size=16)
# (per-device batch, warm-up steps, timed steps) for: full GPU run, --quick on GPU, --cpu
STEPS = {
    "gpt": {"full": (16, 10, 30), "quick": (16, 5, 15), "cpu": (4, 2, 3)},
    "resnet": {"full": (512, 20, 100), "quick": (512, 10, 40), "cpu": (4, 1, 2)},
}
IMAGE = {False: 32, True: 8}  # ResNet input side on the GPU / on the CPU
DESC = {"gpt": {False: "GPT-2 124M, seq 1024", True: "GPT 2x32 (CPU stand-in), seq 16"},
        "resnet": {False: "ResNet-18, 32x32", True: "ResNet-18, 8x8 (CPU)"}}
SHARD = {"gpt": ("Block",), "resnet": ("BasicBlock",)}  # FSDP2 shards these submodules one by one


class Batches:
    """A few synthetic batches made once on the device and cycled (the benchmark measures training)."""

    def __init__(self, make, n: int = 4) -> None:
        self.batches = [make(i) for i in range(n)]

    def __len__(self) -> int:
        return len(self.batches)

    def __iter__(self):
        return iter(self.batches)


def _resnet_flops(side: int) -> float:
    """FLOPs of one image's forward+backward, counted on a separate CPU copy: the engine would
    otherwise count them on the wrapped (DDP/FSDP2) model inside the first step."""
    from gpudoctor.train.metrics import count_flops

    model, x = resnet18_cifar().eval(), torch.randn(1, 3, side, side)
    return float(count_flops(lambda: model(x).sum().backward()))


def _adamw(params) -> torch.optim.Optimizer:
    return torch.optim.AdamW(params, lr=6e-4, betas=(0.9, 0.95), weight_decay=0.1)


def _sgd(params) -> torch.optim.Optimizer:
    return torch.optim.SGD(params, lr=0.1, momentum=0.9, nesterov=True, weight_decay=5e-4)


def build(model_name: str, strategy: str, batch: int, device: torch.device, rank: int, cpu: bool):
    """(model, optimizer factory, loss, config, data, per-step unit count, unit)."""
    g = torch.Generator(device=device).manual_seed(1000 + rank)  # each rank its own data
    dtype = "fp32" if cpu else "bf16"
    if model_name == "gpt":
        cfg = GPT_TINY if cpu else GPT2_124M
        model = GPT(cfg)
        base = presets.transformer_bf16(compile=False)

        def make(_: int):
            t = torch.randint(0, cfg.vocab_size, (batch, cfg.block_size + 1), device=device, generator=g)
            return (t[:, :-1], t[:, 1:]), None  # the model returns the loss itself

        opt, loss, per_step, unit = _adamw, loss_is_output, batch * cfg.block_size, "tok/s"
        flops = model.flops_per_token() * cfg.block_size  # known: no FLOP-counting pass
    else:
        model = resnet18_cifar()
        base = presets.convnet_bf16()
        if strategy == "fsdp":  # FSDP2: NotImplementedError on channels-last (non-contiguous) weights
            base = base.replace(perf=dataclasses.replace(base.perf, channels_last=False))

        def make(_: int):
            side = IMAGE[cpu]
            x = torch.randn(batch, 3, side, side, device=device, generator=g)
            if strategy != "fsdp":
                x = x.contiguous(memory_format=torch.channels_last)
            return x, torch.randint(0, 10, (batch,), device=device, generator=g)

        opt, loss, per_step, unit = _sgd, nn.CrossEntropyLoss(), batch, "img/s"
        flops = _resnet_flops(IMAGE[cpu])
    config = base.replace(
        device="cpu" if cpu else "auto",
        precision=PrecisionConfig(dtype=dtype, grad_clip_norm=base.precision.grad_clip_norm),
        parallel=ParallelConfig(strategy=strategy, fsdp_shard_modules=SHARD[model_name]),
        log=LogConfig(progress_bar=False, flops_per_sample=flops))
    return model, opt, loss, config, Batches(make), per_step, unit


def run_model(name: str, strategy: str, args: argparse.Namespace, env, cuda: bool) -> dict:
    """Train one model for its warm-up + timed steps; the figures (rank 0's view)."""
    device = torch.device("cuda", env.local_rank) if cuda else torch.device("cpu")
    batch, warmup, timed = STEPS[name]["cpu" if args.cpu else ("quick" if args.quick else "full")]
    model, opt, loss, config, data, per_step, unit = build(name, strategy, batch, device, env.rank, args.cpu)
    params = sum(p.numel() for p in model.parameters())
    trainer = Trainer(model, opt, loss, config=config.replace(max_steps=warmup + timed))
    timer = StepTimer(trainer.optimizer, warmup, timed)
    trainer.fit(data, epochs=100_000)
    seconds = timer.seconds()
    world = trainer.parallel.world_size
    return {"model": name, "model_desc": DESC[name][args.cpu], "status": "ok",
            "strategy": trainer.parallel.strategy, "world_size": world,
            "throughput": per_step * world * timed / seconds, "unit": unit,
            "per_device_batch": batch, "warmup_steps": warmup, "timed_steps": timed, "seconds": seconds,
            "precision": config.precision.dtype, "compile": "off", "params": params,
            "channels_last": config.perf.channels_last,
            "device": torch.cuda.get_device_name(device) if cuda else "cpu",
            "timing": "CUDA events, one sync at the end" if cuda else "wall clock (CPU)"}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--models", default="gpt,resnet", help="comma list of gpt, resnet")
    p.add_argument("--strategies", default="ddp,fsdp", help="comma list of ddp, fsdp (one process: no wrapper)")
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--quick", action="store_true")
    p.add_argument("--cpu", action="store_true", help="tiny models on the CPU (gloo): for tests")
    args = p.parse_args(argv)
    models = [m for m in args.models.split(",") if m]
    if not models or set(models) - set(STEPS):
        p.error(f"--models {args.models!r}: give a comma list of {', '.join(STEPS)}")
    strategies = [s for s in args.strategies.split(",") if s]
    if not strategies or set(strategies) - {"ddp", "fsdp"}:
        p.error(f"--strategies {args.strategies!r}: give a comma list of ddp, fsdp")
    from gpudoctor.core.dist import dist_env

    env = dist_env()
    cuda = not args.cpu and torch.cuda.is_available()
    results = []
    for strategy in strategies:
        for name in models:
            try:
                results.append(run_model(name, strategy, args, env, cuda))
            except Exception as exc:  # noqa: BLE001 - recorded; the next pair still runs
                results.append({"model": name, "model_desc": DESC[name][args.cpu], "status": "failed",
                                "strategy": strategy if env.world_size > 1 else "none",
                                "error": f"{type(exc).__name__}: {exc}"[:600]})
        if cuda:
            torch.cuda.empty_cache()
        if env.rank == 0:  # after each model: a later hang or crash keeps what was measured
            write_text_atomic(args.out, json.dumps({"results": results}, indent=2) + "\n")
    destroy_distributed()
    return 0


if __name__ == "__main__":
    sys.exit(main())
