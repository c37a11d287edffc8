"""gpudoctor.train against hand-tuned PyTorch, Lightning and Accelerate (issue 5's benchmark).

    PYTHONPATH=src python benchmarks/peers.py --out benchmarks/results/peers-h200.json            # one GPU
    PYTHONPATH=src torchrun --standalone --nproc_per_node 2 benchmarks/peers.py --part ddp \\
        --out benchmarks/results/peers-2xh200.json                                             # two GPUs

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

Re-running a subset: ``--only resnet/plain,gpt124m/gpudoctor_compiled`` runs just those names;
``--merge-into OLD.json`` keeps OLD's other entries, tags every entry with the run it came from
(``run_utc``) and recomputes the ratios. ``--smoke`` runs every chosen configuration for a few steps
on tiny sizes on whatever device there is (the CPU included; no compile): a test runs it.
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
from common import CifarStyle, StepTimer, loss_is_output  # noqa: E402
from models import GPT, GPT2_124M, GPT2_350M, GPTConfig, resnet18_cifar  # noqa: E402
from peers_results import merge_runs, print_table, ratios  # noqa: E402

from gpudoctor.core.dist import dist_env  # noqa: E402
from gpudoctor.train import GpuLoader, LogConfig, Trainer, TrainConfig, presets  # noqa: E402
from gpudoctor.train.config import CheckpointConfig  # noqa: E402
from gpudoctor.train.perf import adamw  # noqa: E402
from gpudoctor.records.atomic import write_text_atomic  # noqa: E402

PEAK_BF16_H200 = 989e12
GPT_TINY = GPTConfig(n_layer=2, n_head=2, n_embd=32, vocab_size=128, block_size=16)  # --smoke
DEV = torch.device("cuda")  # main() switches to the CPU for --smoke without a GPU


def sgd(model: nn.Module) -> torch.optim.Optimizer:
    return torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, nesterov=True, weight_decay=5e-4)


def peer_loader(ds: Dataset, batch: int, workers: int) -> DataLoader:
    """The hand-tuned loader every peer gets: workers, pinned memory, persistent workers, prefetch."""
    extra = {"persistent_workers": True, "prefetch_factor": 4} if workers > 0 else {}
    return DataLoader(ds, batch_size=batch, shuffle=True, num_workers=workers, pin_memory=DEV.type == "cuda",
                      drop_last=True, **extra)


def resnet_plain(ds, args) -> dict:
    model = resnet18_cifar().to(DEV, memory_format=torch.channels_last)
    opt = sgd(model)
    timer = StepTimer(opt, args.warmup, args.steps)
    loader = peer_loader(ds, args.batch, args.workers)
    total = args.warmup + args.steps
    done = 0
    while done < total:
        for x, y in loader:
            x = x.to(DEV, non_blocking=True).contiguous(memory_format=torch.channels_last)
            y = y.to(DEV, non_blocking=True)
            with torch.autocast(DEV.type, dtype=torch.bfloat16):
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
    loader = GpuLoader(ds.images, ds.labels, args.batch, DEV, channels_last=DEV.type == "cuda")
    cfg = presets.convnet_bf16().replace(max_steps=args.warmup + args.steps, log=LogConfig(progress_bar=False))
    if DEV.type != "cuda":  # --smoke on the CPU: bf16 autocast works there, NHWC buys nothing
        cfg = cfg.replace(perf=cfg.perf.__class__(channels_last=False))
    result = Trainer(model, opt, nn.CrossEntropyLoss(), config=cfg).fit(loader, epochs=1000)
    return {**timer.result(args.batch, "img"), "engine_mfu": result.mfu}


# ---------------------------------------------------------------------------------- GPT
class TokenBatches:
    """Random token batches already on the GPU (synthetic data: the benchmark measures training)."""

    def __init__(self, batch: int, seq: int, vocab: int, n: int = 8, seed: int = 0) -> None:
        g = torch.Generator(device=DEV).manual_seed(seed)
        self.batches = [torch.randint(0, vocab, (batch, seq + 1), device=DEV, generator=g) for _ in range(n)]
        self.batch_size = batch

    def __len__(self) -> int:
        return len(self.batches)

    def __iter__(self):
        for t in self.batches:
            yield (t[:, :-1], t[:, 1:]), None  # inputs = (tokens, targets); the model returns the loss


def _adamw(params) -> torch.optim.Optimizer:
    """The GPT optimizer, as the engine's documented factory: ``params -> optimizer`` (FSDP2's
    sharded parameters exist only after wrapping, so the engine passes parameters, not the model);
    the engine's fused AdamW (``gpudoctor.train.perf.adamw``: fused on a GPU)."""
    return adamw(params, lr=6e-4, betas=(0.9, 0.95), weight_decay=0.1, device=DEV)


def gpt_hand_compiled(args, cfg: GPTConfig | None = None) -> dict:
    cfg = cfg or GPT2_124M  # read at call time: --smoke swaps in a tiny GPT
    torch.backends.cuda.matmul.allow_tf32 = True
    model = GPT(cfg).to(DEV)
    opt = _adamw(model.parameters())
    compiled = torch.compile(model) if args.compile else model
    data = TokenBatches(args.gpt_batch, cfg.block_size, cfg.vocab_size)
    timer = StepTimer(opt, args.gpt_warmup, args.gpt_steps)
    step = 0
    while step < args.gpt_warmup + args.gpt_steps:
        for (inputs, _) in data:
            with torch.autocast(DEV.type, dtype=torch.bfloat16):
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
    out["compile"] = "torch.compile(mode='default')" if args.compile else "off"
    return out


def gpt_engine(args, cfg: GPTConfig | None = None, *, compile: bool = True, steps: int | None = None) -> dict:
    cfg = cfg or GPT2_124M
    compile = compile and args.compile
    model = GPT(cfg)
    flops_token = model.flops_per_token()
    steps = steps or args.gpt_steps
    config = presets.transformer_bf16(compile=compile).replace(
        max_steps=args.gpt_warmup + steps,
        log=LogConfig(progress_bar=False, flops_per_sample=flops_token * cfg.block_size))
    trainer = Trainer(model, _adamw, loss_is_output, config=config)
    timer = StepTimer(trainer.optimizer, args.gpt_warmup, steps)
    data = TokenBatches(args.gpt_batch, cfg.block_size, cfg.vocab_size, seed=dist_env().rank)
    trainer.fit(data, epochs=10_000)
    world = trainer.parallel.world_size
    out = timer.result(args.gpt_batch * cfg.block_size * world, "tok")
    out["params"] = model.num_params()
    out["world_size"] = world
    out["mfu_vs_989"] = flops_token * out["tok_per_s"] / world / PEAK_BF16_H200
    out["compile"] = f"torch.compile(mode={config.perf.compile_mode!r})" if compile else "off"
    return out


# ---------------------------------------------------------------------------------- driver
CONFIGURATIONS = ("resnet/gpudoctor_gpu_loader", "resnet/plain", "resnet/gpudoctor_defaults", "resnet/lightning_bf16",
                  "resnet/accelerate_bf16", "gpt124m/hand_compiled", "gpt124m/gpudoctor_compiled",
                  "gpt350m/gpudoctor_compiled")


def run_part(name: str, fn, results: dict, deadline: float, need_s: float = 10.0, run_utc: str = "") -> None:
    """Run one configuration unless it would likely end after ``deadline`` (``need_s``: its usual
    duration, compile included)."""
    if time.perf_counter() + need_s > deadline:
        results[name] = {"skipped": "time budget used up", "run_utc": run_utc}
        print(f"[peers] {name}: skipped (time budget)", flush=True)
        return
    t0 = time.perf_counter()
    try:
        results[name] = fn()
    except Exception as exc:  # one failing configuration must not stop the others
        results[name] = {"error": f"{type(exc).__name__}: {exc}", "traceback": traceback.format_exc()[-2000:]}
    results[name]["wall_s"] = round(time.perf_counter() - t0, 1)
    results[name]["run_utc"] = run_utc  # which run measured it (entries merged from several runs)
    if DEV.type == "cuda":
        torch.cuda.empty_cache()
    rate = results[name].get("img_per_s") or results[name].get("tok_per_s")
    print(f"[peers] {name}: " + (f"{rate:,.0f}" if rate else results[name].get("error", "skipped")), flush=True)


def write_results(args, env, results: dict) -> dict:
    """Write the JSON (rank 0), also after each configuration so a killed run keeps what it measured."""
    derived = ratios(results)
    if env.rank != 0 or not args.out:
        return derived
    doc = {"command": " ".join([os.path.basename(sys.executable), *sys.argv]),
           "world_size": env.world_size, "gpu": torch.cuda.get_device_name(0) if DEV.type == "cuda" else "cpu",
           "torch": torch.__version__, "python": platform.python_version(), "date_utc": args.run_utc,
           "results": results, "ratios": derived}
    if args.smoke:
        doc["smoke"] = "tiny sizes, a few steps, no compile: checks that every path runs, not its speed"
    if args.part == "ddp" and args.previous:  # the 2-GPU job runs 1 then 2 processes into one file
        old = json.loads(args.previous)
        doc["results"] = {**old.get("results", {}), **results}
        doc["command"] = old.get("command", "") + " ; " + doc["command"]
        one, two = (doc["results"].get(f"gpt124m/gpudoctor_ddp_{n}gpu", {}).get("tok_per_s") for n in (1, 2))
        if one and two:
            doc["ratios"] = derived = {"ddp_2gpu_vs_1gpu (goal >= 1.85)": two / one}
    elif args.merge_into is not None:
        doc = merge_runs(json.loads(args.merge_into.read_text()), doc)
        derived = doc["ratios"]
    args.out.parent.mkdir(parents=True, exist_ok=True)
    write_text_atomic(args.out, json.dumps(doc, indent=2, default=str) + "\n")
    return derived


def apply_smoke(args) -> None:
    """Tiny sizes for ``--smoke``: 2 timed steps after 1 warm-up step, no compile, one peer worker."""
    global GPT2_124M, GPT2_350M
    args.images, args.batch, args.workers, args.warmup, args.steps = 64, 8, 0, 1, 2
    args.gpt_batch, args.gpt_warmup, args.gpt_steps = 2, 1, 2
    args.compile = False
    GPT2_124M = GPT_TINY
    GPT2_350M = GPTConfig(n_layer=3, n_head=2, n_embd=32, vocab_size=128, block_size=16)


def main(argv: list[str] | None = None) -> None:
    global DEV
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--part", choices=("all", "resnet", "gpt", "ddp"), default="all")
    p.add_argument("--only", default="", help="comma-separated configuration names (of: " + ", ".join(
        CONFIGURATIONS) + "); the others are not run")
    p.add_argument("--out", type=Path, default=None)
    p.add_argument("--merge-into", type=Path, default=None,
                   help="an earlier results JSON: keep its other entries, tag each with its run, recompute ratios")
    p.add_argument("--smoke", action="store_true", help="tiny sizes, a few steps, no compile; runs on the CPU")
    p.add_argument("--no-compile", dest="compile", action="store_false", help="GPT configurations run eager")
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
    args = p.parse_args(argv)
    only = {n.strip() for n in args.only.split(",") if n.strip()}
    if only - set(CONFIGURATIONS):
        unknown = ", ".join(sorted(only - set(CONFIGURATIONS)))
        p.error(f"--only: unknown {unknown}; choose from {', '.join(CONFIGURATIONS)}")
    if args.merge_into is not None and not args.merge_into.exists():
        p.error(f"--merge-into {args.merge_into}: no such file")
    if args.merge_into is not None and args.smoke and "smoke" not in json.loads(args.merge_into.read_text()):
        p.error("--smoke results must not be merged into real measurements; write them to their own --out")
    if args.smoke:
        apply_smoke(args)
        if not torch.cuda.is_available():
            DEV = torch.device("cpu")
    elif not torch.cuda.is_available():
        sys.exit("benchmarks/peers.py needs a CUDA GPU (or --smoke to check the paths on the CPU)")
    args.run_utc = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    deadline = time.perf_counter() + args.budget_s
    env = dist_env()
    args.previous = args.out.read_text() if args.out and args.out.exists() and args.part == "ddp" else None
    results: dict = {}

    def run(name, fn, need_s=10.0):
        if only and name not in only:
            return
        run_part(name, fn, results, deadline, need_s, args.run_utc)
        write_results(args, env, results)

    if args.part in ("all", "resnet") and (not only or any(n.startswith("resnet/") for n in only)):
        ds = CifarStyle(args.images)
        for name, fn in (("resnet/gpudoctor_gpu_loader", resnet_engine_gpu_loader), ("resnet/plain", resnet_plain),
                         ("resnet/gpudoctor_defaults", resnet_engine_defaults),
                         ("resnet/lightning_bf16", resnet_lightning), ("resnet/accelerate_bf16", resnet_accelerate)):
            run(name, lambda fn=fn: fn(ds, args))
    if args.part in ("all", "gpt"):
        run("gpt124m/hand_compiled", lambda: gpt_hand_compiled(args), 40)
        run("gpt124m/gpudoctor_compiled", lambda: gpt_engine(args), 30)
        steps_350m = max(min(10, args.gpt_steps), args.gpt_steps // 2)  # 15 by default, 2 with --smoke
        run("gpt350m/gpudoctor_compiled", lambda: gpt_engine(args, GPT2_350M, steps=steps_350m), 45)
    if args.part == "ddp":
        run(f"gpt124m/gpudoctor_ddp_{env.world_size}gpu", lambda: gpt_engine(args, compile=args.ddp_compile), 0)
    derived = write_results(args, env, results)
    if env.rank == 0:
        print_table(results, derived)
    from gpudoctor.core.dist import destroy_distributed

    destroy_distributed()


if __name__ == "__main__":
    main()
