"""gpudoctor.train against hand-written loops, on models the engine was not built around (issue 16).

    PYTHONPATH=src python benchmarks/engine_vs_hand.py --nanogpt /path/to/nanoGPT \\
        --out benchmarks/results/engine_vs_hand-h200.json                       # one H200, ~6-8 minutes
    PYTHONPATH=src python benchmarks/engine_vs_hand.py --nanogpt /tmp/nanogpt --smoke --out /tmp/s.json  # CPU

``--nanogpt`` is a checkout of karpathy/nanoGPT (only its ``model.py`` is used; this repository
does not carry it). Every model runs engine and hand loop alternately in ONE process (A B A B for
``--repeats`` rounds), each arm on a fresh model, so drift of the machine falls on both; the ratio
is engine / hand per round, reported with its median, minimum and maximum.

Models:
  resnet50  torchvision ResNet-50, 160x160, batch 256, a Dataset of in-memory uint8 images with
            per-sample CPU augmentation (random crop, flip, normalise). Engine: its defaults
            (``TrainConfig(batch_size=256)``: bf16 auto, channels-last auto, fast_loader). Hand:
            bf16 autocast, channels-last, cudnn.benchmark, workers, pinned, non_blocking.
  vit_b16   torchvision ViT-B/16, 224x224, batch 128, the same kind of Dataset. Engine:
            ``presets.transformer_bf16(compile=True)``. Hand: bf16 autocast, ``torch.compile``,
            clip 1.0, workers, pinned, non_blocking.
  gpt124m   nanoGPT's GPT (its model.py), GPT-2 124M, seq 1024, batch 16, GPU-resident token
            batches. Engine: ``presets.transformer_bf16(compile=True)`` with
            ``loss_fn(model(tokens), targets)`` (a user's two-line wrapper returns the full
            logits). Hand: nanoGPT's own loop (``torch.compile(model)``, ``logits, loss =
            model(X, Y)`` under bf16 autocast, clip 1.0, nanoGPT's fused AdamW).
  gpt350m   nanoGPT's GPT at 24 layers x 1024 (~350M), seq 1024, batch ``--gpt350m-batch``
            (16), engine and hand as for gpt124m; both with MFU against 989 TFLOP/s (dense bf16
            of an H200) by nanoGPT's FLOPs-per-token formula (6N + 12 L H Q T).
  gpt350m_b32  the same at batch 32 (what a user raising the batch for throughput would run).
  gpt350m_b64  the same at batch 64.
  gpt350m_autotune  engine only, batch 32, ``perf.compile_mode="max-autotune-no-cudagraphs"``.

Both arms of a model get the same optimizer (the user's choice, not the loop's: fused on a GPU).
Timing: an optimizer step post-hook records a CUDA event after warm-up step ``--warmup`` and after
the last timed step; one sync at the end. The engine's own ``FitResult`` figures (steady rate,
start-up) are stored next to it.
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib.util
import json
import math
import platform
import statistics
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, Dataset

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import StepTimer  # noqa: E402

from gpudoctor.train import LogConfig, Trainer, TrainConfig, presets  # noqa: E402
from gpudoctor.train.data import default_num_workers  # noqa: E402

PEAK_BF16_H200 = 989e12
MEAN, STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)
DEV = torch.device("cuda")  # main() switches to the CPU for --smoke without a GPU


def fit_figures(result) -> dict:
    """The engine's own account of the run (steady rate after its warm-up, start-up on its own)."""
    return {"engine_samples_per_s": round(result.samples_per_s, 1), "engine_startup_s": result.startup_s,
            "engine_first_batch_s": result.first_batch_s, "engine_steady_steps": result.steady_steps,
            "engine_mfu": result.mfu}


# ---------------------------------------------------------------------------------- image data
class AugmentedImages(Dataset):
    """uint8 HWC images in memory, ``pad`` pixels larger than ``size``; per sample on the CPU:
    random crop to ``size``, horizontal flip, to float, normalise."""

    def __init__(self, n: int, size: int, pad: int, classes: int = 1000, seed: int = 0) -> None:
        g = torch.Generator().manual_seed(seed)
        self.size, self.pad = size, pad
        self.images = torch.randint(0, 256, (n, size + pad, size + pad, 3), dtype=torch.uint8, generator=g)
        self.labels = torch.randint(0, classes, (n,), generator=g)
        self.mean = torch.tensor(MEAN).view(3, 1, 1)
        self.std = torch.tensor(STD).view(3, 1, 1)

    def __len__(self) -> int:
        return len(self.images)

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        dy, dx = torch.randint(0, self.pad + 1, (2,)).tolist()
        img = self.images[i, dy:dy + self.size, dx:dx + self.size].permute(2, 0, 1)
        if torch.rand(()) < 0.5:
            img = img.flip(2)
        return (img.float().div_(255) - self.mean) / self.std, self.labels[i]


def hand_loader(ds: Dataset, batch: int, workers: int) -> DataLoader:
    extra = {"persistent_workers": True, "prefetch_factor": 4} if workers > 0 else {}
    return DataLoader(ds, batch_size=batch, shuffle=True, num_workers=workers, pin_memory=DEV.type == "cuda",
                      drop_last=True, **extra)


def image_hand(make_model, opt_fn, ds, a, *, batch: int, channels_last: bool, compile: bool, clip: float | None):
    torch.backends.cudnn.benchmark = True
    model = make_model().to(DEV)
    if channels_last:
        model = model.to(memory_format=torch.channels_last)
    opt = opt_fn(model)
    run = torch.compile(model) if compile else model
    timer = StepTimer(opt, a.warmup, a.steps)
    loader, done, total = hand_loader(ds, batch, a.workers), 0, a.warmup + a.steps
    while done < total:
        for x, y in loader:
            x, y = x.to(DEV, non_blocking=True), y.to(DEV, non_blocking=True)
            if channels_last:
                x = x.contiguous(memory_format=torch.channels_last)
            with torch.autocast(DEV.type, dtype=torch.bfloat16):
                loss = F.cross_entropy(run(x), y)
            loss.backward()
            if clip is not None:
                torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
            opt.step()
            opt.zero_grad(set_to_none=True)
            done += 1
            if done == total:
                break
    return timer.result(batch)


def image_engine(make_model, opt_fn, ds, a, *, batch: int, config: TrainConfig):
    model = make_model()
    opt = opt_fn(model)
    timer = StepTimer(opt, a.warmup, a.steps)
    cfg = config.replace(batch_size=batch, max_steps=a.warmup + a.steps,
                         log=LogConfig(progress_bar=False, warmup_steps=a.warmup))
    if DEV.type == "cpu":
        cfg = cfg.replace(device="cpu")
    result = Trainer(model, opt, nn.CrossEntropyLoss(), config=cfg).fit(ds, epochs=10_000)
    return {**timer.result(batch), **fit_figures(result)}


def sgd(model: nn.Module) -> torch.optim.Optimizer:
    return torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, nesterov=True, weight_decay=5e-5,
                           fused=DEV.type == "cuda")


def adamw(model: nn.Module) -> torch.optim.Optimizer:
    return torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.05, fused=DEV.type == "cuda")


# ---------------------------------------------------------------------------------- nanoGPT
def load_nanogpt(path: str):
    """nanoGPT's model.py from a checkout (imported under its own name: benchmarks/models.py differs)."""
    file = Path(path) / "model.py"
    if not file.is_file():
        sys.exit(f"--nanogpt {path}: no model.py there; pass a checkout of karpathy/nanoGPT")
    spec = importlib.util.spec_from_file_location("nanogpt_model", file)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # torch.compile re-imports the model's module by name
    spec.loader.exec_module(module)
    return module


class FullLogits(nn.Module):
    """What a user writes to train nanoGPT's GPT through ``loss_fn(model(x), y)``: its forward without
    targets returns only the last position's logits, so this returns all of them."""

    def __init__(self, gpt: nn.Module) -> None:
        super().__init__()
        self.gpt = gpt

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        t = self.gpt.transformer
        pos = torch.arange(idx.size(1), device=idx.device)
        x = t.drop(t.wte(idx) + t.wpe(pos))
        for block in t.h:
            x = block(x)
        return self.gpt.lm_head(t.ln_f(x))


def lm_loss(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    return F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1), ignore_index=-1)  # nanoGPT's


def token_batches(batch: int, seq: int, vocab: int, n: int = 8) -> list[tuple[torch.Tensor, torch.Tensor]]:
    g = torch.Generator(device=DEV).manual_seed(0)
    out = []
    for _ in range(n):
        t = torch.randint(0, vocab, (batch, seq + 1), device=DEV, generator=g)
        out.append((t[:, :-1].contiguous(), t[:, 1:].contiguous()))
    return out


def flops_per_token(gpt: nn.Module, cfg) -> float:
    """nanoGPT's ``estimate_mfu`` formula (PaLM appendix B): 6N + 12 L H Q T."""
    return 6 * gpt.get_num_params() + 12 * cfg.n_layer * cfg.n_head * (cfg.n_embd // cfg.n_head) * cfg.block_size


def gpt_config(ng, a, big: bool):
    if a.smoke:
        return ng.GPTConfig(n_layer=2, n_head=2, n_embd=32, block_size=16, vocab_size=128, dropout=0.0, bias=False)
    if big:
        return ng.GPTConfig(n_layer=24, n_head=16, n_embd=1024, block_size=1024, vocab_size=50304, dropout=0.0,
                            bias=False)
    return ng.GPTConfig(n_layer=12, n_head=12, n_embd=768, block_size=1024, vocab_size=50304, dropout=0.0, bias=False)


def nanogpt_optimizer(gpt: nn.Module) -> torch.optim.Optimizer:
    return gpt.configure_optimizers(0.1, 6e-4, (0.9, 0.95), DEV.type)  # nanoGPT's own (fused AdamW on CUDA)


def gpt_hand(ng, a, big: bool = False, batch: int | None = None) -> dict:
    cfg, batch = gpt_config(ng, a, big), batch or a.gpt_batch
    torch.manual_seed(0)
    gpt = ng.GPT(cfg).to(DEV)
    opt = nanogpt_optimizer(gpt)
    model = torch.compile(gpt) if a.compile else gpt
    data = token_batches(batch, cfg.block_size, cfg.vocab_size)
    timer = StepTimer(opt, a.warmup, a.steps)
    for i in range(a.warmup + a.steps):
        x, y = data[i % len(data)]
        with torch.autocast(DEV.type, dtype=torch.bfloat16):
            _, loss = model(x, y)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(gpt.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
    out = timer.result(batch * cfg.block_size)
    out["mfu_vs_989"] = flops_per_token(gpt, cfg) * out["per_s"] / PEAK_BF16_H200
    return out


def gpt_engine(ng, a, big: bool = False, batch: int | None = None, compile_mode: str | None = None) -> dict:
    cfg, batch = gpt_config(ng, a, big), batch or a.gpt_batch
    torch.manual_seed(0)
    gpt = ng.GPT(cfg)
    opt = nanogpt_optimizer(gpt.to(DEV))
    timer = StepTimer(opt, a.warmup, a.steps)
    fpt = flops_per_token(gpt, cfg)
    config = presets.transformer_bf16(compile=a.compile)
    if compile_mode:
        config = config.replace(perf=dataclasses.replace(config.perf, compile_mode=compile_mode))
    config = config.replace(
        max_steps=a.warmup + a.steps,
        log=LogConfig(progress_bar=False, warmup_steps=a.warmup, flops_per_sample=fpt * cfg.block_size))
    if DEV.type == "cpu":
        config = config.replace(device="cpu")
    result = Trainer(FullLogits(gpt), opt, lm_loss, config=config).fit(
        token_batches(batch, cfg.block_size, cfg.vocab_size), epochs=10_000)
    out = {**timer.result(batch * cfg.block_size), **fit_figures(result)}
    out["mfu_vs_989"] = fpt * out["per_s"] / PEAK_BF16_H200
    return out


# ---------------------------------------------------------------------------------- the run
def arms(a, ng) -> dict[str, tuple]:
    """model -> (engine arm, hand arm or None, unit). torchvision is imported only by its models' arms."""
    from types import SimpleNamespace

    try:
        import torchvision
    except ImportError:  # the GPT arms run without it
        def missing(*_a, **_k):
            sys.exit("resnet50/vit_b16 need torchvision: install it, or pass --only gpt124m,gpt350m")
        torchvision = SimpleNamespace(models=SimpleNamespace(resnet18=missing, resnet50=missing, vit_b_16=missing,
                                                             VisionTransformer=missing))
    size_r, size_v = (32, 32) if a.smoke else (160, 224)
    res_ds = AugmentedImages(a.images, size_r, 16 if not a.smoke else 4)
    vit_ds = AugmentedImages(a.images, size_v, 16 if not a.smoke else 4)
    resnet = torchvision.models.resnet18 if a.smoke else torchvision.models.resnet50  # smoke: CPU-sized
    if a.smoke:
        def vit():
            return torchvision.models.VisionTransformer(image_size=32, patch_size=16, num_layers=2, num_heads=2,
                                                        hidden_dim=32, mlp_dim=64)
    else:
        vit = torchvision.models.vit_b_16
    rb, vb, b350 = a.resnet_batch, a.vit_batch, a.gpt350m_batch
    return {
        "resnet50": (lambda: image_engine(resnet, sgd, res_ds, a, batch=rb, config=TrainConfig()),
                     lambda: image_hand(resnet, sgd, res_ds, a, batch=rb, channels_last=True, compile=False,
                                        clip=None), "img"),
        "vit_b16": (lambda: image_engine(vit, adamw, vit_ds, a, batch=vb,
                                         config=presets.transformer_bf16(compile=a.compile)),
                    lambda: image_hand(vit, adamw, vit_ds, a, batch=vb, channels_last=False, compile=a.compile,
                                       clip=1.0), "img"),
        "gpt124m": (lambda: gpt_engine(ng, a), lambda: gpt_hand(ng, a), "tok"),
        "gpt350m": (lambda: gpt_engine(ng, a, big=True, batch=b350), lambda: gpt_hand(ng, a, big=True, batch=b350),
                    "tok"),
        "gpt350m_b32": (lambda: gpt_engine(ng, a, big=True, batch=2 * b350),
                        lambda: gpt_hand(ng, a, big=True, batch=2 * b350), "tok"),
        "gpt350m_b64": (lambda: gpt_engine(ng, a, big=True, batch=4 * b350),
                        lambda: gpt_hand(ng, a, big=True, batch=4 * b350), "tok"),
        "gpt350m_autotune": (lambda: gpt_engine(ng, a, big=True, batch=2 * b350,
                                                compile_mode="max-autotune-no-cudagraphs"), None, "tok"),
    }


def summarise(engine: list[dict], hand: list[dict]) -> dict:
    ratios = [e["per_s"] / h["per_s"] for e, h in zip(engine, hand)]
    out = {"engine_per_s": [round(e["per_s"], 1) for e in engine], "hand_per_s": [round(h["per_s"], 1) for h in hand]}
    if ratios:
        out.update(ratio_median=round(statistics.median(ratios), 4), ratio_min=round(min(ratios), 4),
                   ratio_max=round(max(ratios), 4), ratios=[round(r, 4) for r in ratios])
    return out


def main(argv: list[str] | None = None) -> int:
    global DEV
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--nanogpt", required=True, help="path to a karpathy/nanoGPT checkout (its model.py)")
    p.add_argument("--out", required=True, help="JSON file to write")
    p.add_argument("--only", default="resnet50,vit_b16,gpt124m,gpt350m", help="comma-separated models")
    p.add_argument("--repeats", type=int, default=2, help="A B rounds per model")
    p.add_argument("--warmup", type=int, default=10)
    p.add_argument("--steps", type=int, default=40)
    p.add_argument("--resnet-batch", type=int, default=256)
    p.add_argument("--vit-batch", type=int, default=128)
    p.add_argument("--gpt-batch", type=int, default=16)
    p.add_argument("--gpt350m-batch", type=int, default=16, help="gpt350m's batch (gpt350m_b32: twice it)")
    p.add_argument("--images", type=int, default=4096, help="images in each in-memory dataset")
    p.add_argument("--workers", type=int, default=None, help="hand loop's loader workers (default: the engine's)")
    p.add_argument("--budget-s", type=float, default=460.0, help="skip runs that would start after this")
    p.add_argument("--smoke", action="store_true", help="tiny sizes, few steps, no compile (runs on the CPU)")
    a = p.parse_args(argv)
    a.compile = not a.smoke
    if a.smoke:
        a.warmup, a.steps, a.repeats = 2, 3, min(a.repeats, 2)
        a.resnet_batch, a.vit_batch, a.gpt_batch, a.gpt350m_batch, a.images = 4, 4, 2, 2, 64
        if not torch.cuda.is_available():
            DEV = torch.device("cpu")
    elif not torch.cuda.is_available():
        sys.exit("no CUDA GPU: run with --smoke on the CPU")
    a.workers = default_num_workers() if a.workers is None else a.workers
    ng = load_nanogpt(a.nanogpt)
    table = arms(a, ng)
    chosen = [m.strip() for m in a.only.split(",") if m.strip()]
    unknown = sorted(set(chosen) - set(table))
    if unknown:
        sys.exit(f"--only: unknown {unknown}; choose from {sorted(table)}")

    t0 = time.perf_counter()
    env = {"torch": torch.__version__, "python": platform.python_version(), "device": str(DEV),
           "gpu": torch.cuda.get_device_name(0) if DEV.type == "cuda" else None, "workers": a.workers,
           "warmup": a.warmup, "steps": a.steps, "repeats": a.repeats, "smoke": a.smoke,
           "command": " ".join(sys.argv)}
    results: dict = {"env": env, "models": {}, "skipped": []}
    for name in chosen:
        engine_fn, hand_fn, unit = table[name]
        runs: dict[str, list[dict]] = {"engine": [], "hand": []}
        for r in range(a.repeats if hand_fn else 1):
            for arm, fn in (("engine", engine_fn), ("hand", hand_fn)):
                if fn is None:
                    continue
                if time.perf_counter() - t0 > a.budget_s:
                    results["skipped"].append(f"{name}/{arm}#{r}")
                    print(f"[{time.perf_counter() - t0:6.0f}s] budget spent: skipping {name} {arm} round {r}")
                    continue
                start = time.perf_counter()
                out = fn()
                out["wall_s"] = round(time.perf_counter() - start, 1)
                runs[arm].append(out)
                extra = f"  MFU {100 * out['mfu_vs_989']:.1f}%" if "mfu_vs_989" in out else ""
                print(f"[{time.perf_counter() - t0:6.0f}s] {name:8} {arm:6} round {r}: {out['per_s']:>12,.0f} {unit}/s"
                      f"{extra}  ({out['wall_s']}s)", flush=True)
                if DEV.type == "cuda":
                    torch.cuda.empty_cache()
        entry = {"unit": f"{unit}/s", "runs": runs, **summarise(runs["engine"], runs["hand"])}
        if name.startswith("gpt350m"):
            for arm in ("engine", "hand"):
                entry[f"{arm}_mfu_vs_989"] = [round(e["mfu_vs_989"], 4) for e in runs[arm]]
        results["models"][name] = entry
    results["total_s"] = round(time.perf_counter() - t0, 1)

    print("\nmodel      engine/hand (median, min-max)   engine        hand")
    for name, e in results["models"].items():
        ratio = (f"{e['ratio_median']:.3f} ({e['ratio_min']:.3f}-{e['ratio_max']:.3f})"
                 if "ratio_median" in e else "-")
        med = (lambda xs: f"{statistics.median(xs):,.0f}" if xs else "-")
        mfu = "".join(f"  {arm} MFU {100 * statistics.median(e[f'{arm}_mfu_vs_989']):.1f}%"
                      for arm in ("engine", "hand") if e.get(f"{arm}_mfu_vs_989"))
        print(f"{name:10} {ratio:30} {med(e['engine_per_s']):>12} {med(e['hand_per_s']):>12} {e['unit']}{mfu}")
    print(f"total {results['total_s']}s")
    Path(a.out).parent.mkdir(parents=True, exist_ok=True)
    Path(a.out).write_text(json.dumps(results, indent=2, default=lambda v: None if isinstance(v, float)
                                      and not math.isfinite(v) else str(v)) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
