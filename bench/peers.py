"""gpudoctor.train against hand-tuned PyTorch, Lightning and Accelerate (issue 5's benchmark).

    PYTHONPATH=src python bench/peers.py --out bench/results/peers-h200.json            # one GPU
    PYTHONPATH=src torchrun --standalone --nproc_per_node 2 bench/peers.py --part ddp \\
        --out bench/results/peers-2xh200.json                                             # two GPUs

Every configuration trains the same model on the same data with the same batch and optimizer.
Timing: an optimizer step post-hook (which fires in every framework, since all of them end in
``torch.optim.Optimizer.step``) records a CUDA event after warm-up step ``warmup`` and after the
last timed step; the only syncs are at those two ends. Throughput = timed samples (or tokens) /
event time. Data is synthetic (the GPU machine has no internet).

Parts:
  resnet  ResNet-18 (CIFAR variant) on 32x32, batch 512, 50k in-memory uint8 images with per-sample
          CPU augmentation: plain (hand-tuned: 12 workers, pinned, channels-last, bf16), Lightning
          bf16-mixed, Accelerate bf16, gpudoctor.train defaults on the same Dataset, and
          gpudoctor.train with its GPU-resident loader (batched GPU augmentation).
  gpt     GPT-2 124M, seq 1024, bf16: a hand-written compiled loop vs gpudoctor.train compiled;
          a 350M GPT through gpudoctor.train with its MFU against the dense bf16 peak.
  ddp     GPT-2 124M through gpudoctor.train DDP (run under torchrun; with 1 and 2 processes the
          job compares them); eager by default to fit the 2-GPU job's time budget.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
import traceback
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, Dataset

sys.path.insert(0, str(Path(__file__).resolve().parent))
from models import GPT, GPT2_124M, GPT2_350M, resnet18_cifar  # noqa: E402

from gpudoctor.core.dist import dist_env  # noqa: E402
from gpudoctor.train import GpuLoader, LogConfig, Trainer, TrainConfig, presets  # noqa: E402
from gpudoctor.train.config import CheckpointConfig  # noqa: E402

MEAN, STD = (0.4914, 0.4822, 0.4465), (0.2470, 0.2435, 0.2616)
PEAK_BF16_H200 = 989e12


# ---------------------------------------------------------------------------------- timing
class StepTimer:
    """CUDA events after optimizer step ``warmup`` and step ``warmup + timed`` (host syncs: none
    until ``result``). Works for any framework: it hooks ``torch.optim.Optimizer.step``."""

    def __init__(self, optimizer: torch.optim.Optimizer, warmup: int, timed: int) -> None:
        self.warmup, self.timed, self.count = warmup, timed, 0
        self.start = torch.cuda.Event(enable_timing=True)
        self.end = torch.cuda.Event(enable_timing=True)
        self.wall0 = self.wall1 = 0.0
        self.handle = optimizer.register_step_post_hook(self._hook)

    def _hook(self, *_: object) -> None:
        self.count += 1
        if self.count == self.warmup:
            self.start.record()
            self.wall0 = time.perf_counter()
        elif self.count == self.warmup + self.timed:
            self.end.record()
            self.wall1 = time.perf_counter()

    def result(self, per_step: int, unit: str) -> dict:
        self.handle.remove()
        if self.count < self.warmup + self.timed:
            raise RuntimeError(f"only {self.count} optimizer steps ran; expected {self.warmup + self.timed}")
        self.end.synchronize()  # the one sync, at the end
        seconds = self.start.elapsed_time(self.end) / 1e3
        return {f"{unit}_per_s": per_step * self.timed / seconds, "timed_steps": self.timed,
                "warmup_steps": self.warmup, "seconds": seconds}


# ---------------------------------------------------------------------------------- ResNet data
class AugmentedImages(Dataset):
    """50k uint8 HWC images in memory; per-sample CPU augmentation (pad+random crop, flip, normalise)."""

    def __init__(self, n: int, size: int = 32, seed: int = 0) -> None:
        g = torch.Generator().manual_seed(seed)
        self.images = torch.randint(0, 256, (n, size, size, 3), dtype=torch.uint8, generator=g)
        self.labels = torch.randint(0, 10, (n,), generator=g)
        self.mean = torch.tensor(MEAN).view(3, 1, 1)
        self.std = torch.tensor(STD).view(3, 1, 1)

    def __len__(self) -> int:
        return len(self.images)

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        img = self.images[i].permute(2, 0, 1).float().div_(255)  # CHW
        img = F.pad(img.unsqueeze(0), (4, 4, 4, 4), mode="reflect").squeeze(0)
        dy, dx = torch.randint(0, 9, (2,)).tolist()
        img = img[:, dy : dy + 32, dx : dx + 32]
        if torch.rand(()) < 0.5:
            img = img.flip(2)
        return (img - self.mean) / self.std, self.labels[i]


def sgd(model: nn.Module) -> torch.optim.Optimizer:
    return torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, nesterov=True, weight_decay=5e-4)


def peer_loader(ds: Dataset, batch: int, workers: int) -> DataLoader:
    """The hand-tuned loader every peer gets: workers, pinned memory, persistent workers, prefetch."""
    return DataLoader(ds, batch_size=batch, shuffle=True, num_workers=workers, pin_memory=True,
                      persistent_workers=True, prefetch_factor=4, drop_last=True)


def resnet_plain(ds, args) -> dict:
    model = resnet18_cifar().cuda().to(memory_format=torch.channels_last)
    opt = sgd(model)
    timer = StepTimer(opt, args.warmup, args.steps)
    loader = peer_loader(ds, args.batch, args.workers)
    total = args.warmup + args.steps
    done = 0
    while done < total:
        for x, y in loader:
            x = x.cuda(non_blocking=True).contiguous(memory_format=torch.channels_last)
            y = y.cuda(non_blocking=True)
            with torch.autocast("cuda", dtype=torch.bfloat16):
                loss = F.cross_entropy(model(x), y)
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
            done += 1
            if done == total:
                break
    return timer.result(args.batch, "img")


def resnet_lightning(ds, args) -> dict:
    import lightning as L

    class Module(L.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.model = resnet18_cifar()

        def training_step(self, batch, _):
            x, y = batch
            return F.cross_entropy(self.model(x), y)

        def configure_optimizers(self):
            opt = sgd(self.model)
            self.timer = StepTimer(opt, args.warmup, args.steps)
            return opt

    module = Module()
    trainer = L.Trainer(accelerator="gpu", devices=1, precision="bf16-mixed", max_steps=args.warmup + args.steps,
                        logger=False, enable_checkpointing=False, enable_progress_bar=False,
                        enable_model_summary=False, num_sanity_val_steps=0, benchmark=True)
    trainer.fit(module, peer_loader(ds, args.batch, args.workers))
    return module.timer.result(args.batch, "img")


def resnet_accelerate(ds, args) -> dict:
    from accelerate import Accelerator

    accelerator = Accelerator(mixed_precision="bf16")
    torch.backends.cudnn.benchmark = True
    model = resnet18_cifar()
    opt = sgd(model)
    timer = StepTimer(opt, args.warmup, args.steps)
    model, opt, loader = accelerator.prepare(model, opt, peer_loader(ds, args.batch, args.workers))
    total, done = args.warmup + args.steps, 0
    while done < total:
        for x, y in loader:
            loss = F.cross_entropy(model(x), y)
            accelerator.backward(loss)
            opt.step()
            opt.zero_grad(set_to_none=True)
            done += 1
            if done == total:
                break
    return timer.result(args.batch, "img")


def _engine_config(args, **changes) -> TrainConfig:
    return TrainConfig(max_steps=args.warmup + args.steps, log=LogConfig(progress_bar=False),
                       checkpoint=CheckpointConfig()).replace(**changes)


def resnet_engine_defaults(ds, args) -> dict:
    model = resnet18_cifar()
    opt = sgd(model)
    timer = StepTimer(opt, args.warmup, args.steps)
    result = Trainer(model, opt, nn.CrossEntropyLoss(), config=_engine_config(args, batch_size=args.batch)).fit(
        ds, epochs=1000)
    return {**timer.result(args.batch, "img"), "engine_mfu": result.mfu, "engine_precision": result.precision}


def resnet_engine_gpu_loader(ds, args) -> dict:
    model = resnet18_cifar()
    opt = sgd(model)
    timer = StepTimer(opt, args.warmup, args.steps)
    loader = GpuLoader(ds.images, ds.labels, args.batch, torch.device("cuda"), channels_last=True)
    cfg = presets.convnet_bf16().replace(max_steps=args.warmup + args.steps, log=LogConfig(progress_bar=False))
    result = Trainer(model, opt, nn.CrossEntropyLoss(), config=cfg).fit(loader, epochs=1000)
    return {**timer.result(args.batch, "img"), "engine_mfu": result.mfu}


# ---------------------------------------------------------------------------------- GPT
class TokenBatches:
    """Random token batches already on the GPU (synthetic data: the benchmark measures training)."""

    def __init__(self, batch: int, seq: int, vocab: int, n: int = 8, seed: int = 0) -> None:
        g = torch.Generator(device="cuda").manual_seed(seed)
        self.batches = [torch.randint(0, vocab, (batch, seq + 1), device="cuda", generator=g) for _ in range(n)]
        self.batch_size = batch

    def __len__(self) -> int:
        return len(self.batches)

    def __iter__(self):
        for t in self.batches:
            yield (t[:, :-1], t[:, 1:]), None  # inputs = (tokens, targets); the model returns the loss


def _loss_is_output(loss: torch.Tensor, _target: object) -> torch.Tensor:
    return loss


def _adamw(model: nn.Module) -> torch.optim.Optimizer:
    return torch.optim.AdamW(model.parameters(), lr=6e-4, betas=(0.9, 0.95), weight_decay=0.1, fused=True)


def gpt_hand_compiled(args, cfg=GPT2_124M) -> dict:
    torch.backends.cuda.matmul.allow_tf32 = True
    model = GPT(cfg).cuda()
    opt = _adamw(model)
    compiled = torch.compile(model)
    data = TokenBatches(args.gpt_batch, cfg.block_size, cfg.vocab_size)
    timer = StepTimer(opt, args.gpt_warmup, args.gpt_steps)
    step = 0
    while step < args.gpt_warmup + args.gpt_steps:
        for (inputs, _) in data:
            with torch.autocast("cuda", dtype=torch.bfloat16):
                loss = compiled(inputs)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            opt.zero_grad(set_to_none=True)
            step += 1
            if step == args.gpt_warmup + args.gpt_steps:
                break
    out = timer.result(args.gpt_batch * cfg.block_size, "tok")
    out["mfu_vs_989"] = model.flops_per_token() * out["tok_per_s"] / PEAK_BF16_H200
    return out


def gpt_engine(args, cfg=GPT2_124M, *, compile: bool = True, steps: int | None = None) -> dict:
    model = GPT(cfg)
    flops_token = model.flops_per_token()
    steps = steps or args.gpt_steps
    config = presets.transformer_bf16(compile=compile).replace(
        max_steps=args.gpt_warmup + steps,
        log=LogConfig(progress_bar=False, flops_per_sample=flops_token * cfg.block_size))
    trainer = Trainer(model, _adamw, _loss_is_output, config=config)
    timer = StepTimer(trainer.optimizer, args.gpt_warmup, steps)
    data = TokenBatches(args.gpt_batch, cfg.block_size, cfg.vocab_size, seed=dist_env().rank)
    trainer.fit(data, epochs=10_000)
    world = trainer.parallel.world_size
    out = timer.result(args.gpt_batch * cfg.block_size * world, "tok")
    out["params"] = model.num_params()
    out["world_size"] = world
    out["mfu_vs_989"] = flops_token * out["tok_per_s"] / world / PEAK_BF16_H200
    return out


# ---------------------------------------------------------------------------------- driver
def run_part(name: str, fn, results: dict, deadline: float, need_s: float = 10.0) -> None:
    """Run one configuration unless it would likely end after ``deadline`` (``need_s``: its usual
    duration, compile included)."""
    if time.perf_counter() + need_s > deadline:
        results[name] = {"skipped": "time budget used up"}
        return
    t0 = time.perf_counter()
    try:
        results[name] = fn()
    except Exception as exc:  # one failing configuration must not stop the others
        results[name] = {"error": f"{type(exc).__name__}: {exc}", "traceback": traceback.format_exc()[-2000:]}
    results[name]["wall_s"] = round(time.perf_counter() - t0, 1)
    torch.cuda.empty_cache()
    rate = results[name].get("img_per_s") or results[name].get("tok_per_s")
    print(f"[peers] {name}: " + (f"{rate:,.0f}" if rate else results[name].get("error", "skipped")), flush=True)


def ratios(r: dict) -> dict:
    def rate(k):
        v = r.get(k, {})
        return v.get("img_per_s") or v.get("tok_per_s")

    out = {}
    peers = [rate(k) for k in ("resnet/plain", "resnet/lightning_bf16", "resnet/accelerate_bf16") if rate(k)]
    if rate("resnet/gpudoctor_defaults") and peers:
        out["resnet_defaults_vs_best_peer (goal >= 1.0)"] = rate("resnet/gpudoctor_defaults") / max(peers)
    for peer in ("resnet/lightning_bf16", "resnet/accelerate_bf16"):
        if rate("resnet/gpudoctor_gpu_loader") and rate(peer):
            out[f"resnet_gpu_loader_vs_{peer.split('/')[1]} (goal >= 1.4)"] = \
                rate("resnet/gpudoctor_gpu_loader") / rate(peer)
    if rate("gpt124m/gpudoctor_compiled") and rate("gpt124m/hand_compiled"):
        out["gpt124m_engine_vs_hand_compiled (goal >= 1.0)"] = \
            rate("gpt124m/gpudoctor_compiled") / rate("gpt124m/hand_compiled")
    if r.get("gpt350m/gpudoctor_compiled", {}).get("mfu_vs_989"):
        out["gpt350m_mfu_vs_989 (goal >= 0.45)"] = r["gpt350m/gpudoctor_compiled"]["mfu_vs_989"]
    return out


def print_table(results: dict, derived: dict) -> None:
    print(f"\n{'configuration':40} {'throughput':>16} {'MFU':>7} {'wall s':>7}")
    for name, r in results.items():
        rate = r.get("img_per_s") or r.get("tok_per_s")
        unit = "img/s" if "img_per_s" in r else "tok/s"
        mfu = r.get("mfu_vs_989")
        shown = f"{rate:>10,.0f} {unit}" if rate else (r.get("skipped") or r.get("error", "")[:40])
        print(f"{name:40} {shown:>16} {'' if mfu is None else f'{100 * mfu:.1f}%':>7} {r.get('wall_s', 0):>7}")
    for k, v in derived.items():
        print(f"{k:60} {v:.3f}")


def write_results(args, env, results: dict) -> dict:
    """Write the JSON (rank 0), also after each configuration so a killed run keeps what it measured."""
    derived = ratios(results)
    if env.rank != 0 or not args.out:
        return derived
    doc = {"command": " ".join([os.path.basename(sys.executable), *sys.argv]),
           "world_size": env.world_size, "gpu": torch.cuda.get_device_name(0), "torch": torch.__version__,
           "python": platform.python_version(), "date_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
           "results": results, "ratios": derived}
    if args.part == "ddp" and args.previous:  # the 2-GPU job runs 1 then 2 processes into one file
        old = json.loads(args.previous)
        doc["results"] = {**old.get("results", {}), **results}
        doc["command"] = old.get("command", "") + " ; " + doc["command"]
        one, two = (doc["results"].get(f"gpt124m/gpudoctor_ddp_{n}gpu", {}).get("tok_per_s") for n in (1, 2))
        if one and two:
            doc["ratios"] = derived = {"ddp_2gpu_vs_1gpu (goal >= 1.85)": two / one}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(doc, indent=2) + "\n")
    return derived


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--part", choices=("all", "resnet", "gpt", "ddp"), default="all")
    p.add_argument("--out", type=Path, default=None)
    p.add_argument("--budget-s", type=float, default=220.0, help="skip configurations that would start later")
    p.add_argument("--images", type=int, default=50_000)
    p.add_argument("--batch", type=int, default=512)
    p.add_argument("--workers", type=int, default=12, help="the peers' hand-tuned worker count")
    p.add_argument("--warmup", type=int, default=30)
    p.add_argument("--steps", type=int, default=150)
    p.add_argument("--gpt-batch", type=int, default=16)
    p.add_argument("--gpt-warmup", type=int, default=10)
    p.add_argument("--gpt-steps", type=int, default=30)
    p.add_argument("--ddp-compile", action="store_true", help="compile in the ddp part (slower to start)")
    args = p.parse_args()
    if not torch.cuda.is_available():
        sys.exit("bench/peers.py needs a CUDA GPU")
    deadline = time.perf_counter() + args.budget_s
    env = dist_env()
    args.previous = args.out.read_text() if args.out and args.out.exists() and args.part == "ddp" else None
    results: dict = {}

    def run(name, fn, need_s=10.0):
        run_part(name, fn, results, deadline, need_s)
        write_results(args, env, results)

    if args.part in ("all", "resnet"):
        ds = AugmentedImages(args.images)
        for name, fn in (("resnet/gpudoctor_gpu_loader", resnet_engine_gpu_loader), ("resnet/plain", resnet_plain),
                         ("resnet/gpudoctor_defaults", resnet_engine_defaults),
                         ("resnet/lightning_bf16", resnet_lightning), ("resnet/accelerate_bf16", resnet_accelerate)):
            run(name, lambda fn=fn: fn(ds, args))
    if args.part in ("all", "gpt"):
        run("gpt124m/hand_compiled", lambda: gpt_hand_compiled(args), 40)
        run("gpt124m/gpudoctor_compiled", lambda: gpt_engine(args), 30)
        run("gpt350m/gpudoctor_compiled", lambda: gpt_engine(args, GPT2_350M, steps=max(10, args.gpt_steps // 2)), 45)
    if args.part == "ddp":
        run(f"gpt124m/gpudoctor_ddp_{env.world_size}gpu", lambda: gpt_engine(args, compile=args.ddp_compile), 0)
    derived = write_results(args, env, results)
    if env.rank == 0:
        print_table(results, derived)
    from gpudoctor.core.dist import destroy_distributed

    destroy_distributed()


if __name__ == "__main__":
    main()
