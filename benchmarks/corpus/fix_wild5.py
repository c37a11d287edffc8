"""Round five of ``fix_wild.py`` (``--set 5``): public scripts used in none of rounds one to four
nor the corpus, weighted to what rounds one to four sampled least: a loader built in a helper or
another module, configs from YAML/dicts, loops with autocast/GradScaler already, several models
(GAN, EMA, teacher/student), a script that trains on the CPU by design, Accelerate/Lightning, and a
notebook exported as ``.py``.

Held out from the rule changes made after it: ``wild5-cpu-before.md`` is the picture before them.
Kept apart from the harness (``fix_wild.py`` imports these and makes its ``Wild`` rows of them):
name, mirror (owner/name), script path, why it is not run on this CPU. ``WHOLE5``: mirrors
extracted whole. A ``.ipynb`` script is exported to ``<stem>.py`` beside it by ``export_notebook``
(what ``jupyter nbconvert --to script`` writes: code cells under ``# In[n]:``, shell and magic lines
as ``get_ipython()`` calls), and that file is planned.
"""

from __future__ import annotations

import json
from pathlib import Path

WILD5: tuple[tuple[str, str, str, str], ...] = (
    ("timm_train", "huggingface/pytorch-image-models", "train.py", "ImageNet folders, NCCL optional"),
    ("ddim", "ermongroup/ddim", "main.py", "a YAML config, downloads CIFAR-10/CelebA"),
    ("domainbed", "facebookresearch/DomainBed", "domainbed/scripts/train.py", "downloads its data sets"),
    ("mixup_cifar10", "facebookresearch/mixup-cifar10", "train.py", "downloads CIFAR-10, hard-coded .cuda()"),
    ("sparse_learning", "TimDettmers/sparse_learning", "mnist_cifar/main.py", "downloads CIFAR-10/MNIST"),
    ("lightweight_gan", "lucidrains/lightweight-gan", "lightweight_gan/cli.py", "needs fire, kornia, an image folder"),
    ("byol_lightning", "lucidrains/byol-pytorch", "examples/lightning/train.py", "pytorch-lightning, an image folder"),
    ("accelerate_nlp", "huggingface/accelerate", "examples/nlp_example.py", "accelerate, downloads GLUE MRPC and BERT"),
    ("diffusion_policy", "real-stanford/diffusion_policy", "train.py", "hydra, zarr data sets, robomimic"),
    ("controlnet", "lllyasviel/ControlNet", "tutorial_train.py", "pytorch-lightning 1.x, downloads fill50k, SD weights"),
    ("tabm_notebook", "yandex-research/tabm", "example.ipynb", "needs tabm, rtdl_num_embeddings, sklearn download"),
    ("ctgan_tvae", "yandex-research/tab-ddpm", "CTGAN/train_sample_tvae.py", "trains on the CPU by design; its data sets"),
)
WHOLE5 = frozenset({"facebookresearch/DomainBed", "TimDettmers/sparse_learning", "lucidrains/lightweight-gan",
                    "real-stanford/diffusion_policy"})

# each plan's diff read by hand after this round's rule changes ("was": before them; wild5-cpu-before.md)
JUDGED5: dict[str, tuple[str, str]] = {
    "timm_train": ("yes", "no patch is right: its own --amp (autocast + NativeScaler), --channels-last, --torchcompile, "
                   "--pin-mem, -j, cudnn.benchmark set; create_loader in timm/data/loader.py; the reason is weak "
                   "(backward in _backward, a def in the loop called from two branches: 'loop not found')"),
    "ddim": ("yes", "loader in Diffusion.train (runners/diffusion.py) right, num_workers from the YAML config "
             "replaced by 8 and said; persistent_workers=True on those 8 (was 'partly': "
             "config.data.num_workers > 0, the replaced setting); cudnn.benchmark set in main.py already; EMA "
             "helper and DataParallel: compile advice right"),
    "domainbed": ("yes", "no patch: the loop found in algorithms.py is in Fish, which the script never names (was "
                  "'NO': bf16 in Fish.update, one of ~30 algorithms get_algorithm_class(args.algorithm) picks at "
                  "run time, default ERM); the advice says so"),
    "mixup_cifar10": ("yes", "loader: num_workers=8 kept, pin/persistent/prefetch added on trainloader (testloader "
                      "untouched); channels_last after the resume/build if-else; bf16 over net(inputs)+"
                      "mixup_criterion; cudnn_benchmark only because this plan forces it (the script sets "
                      "cudnn.benchmark on CUDA, a real run records it); DataParallel: compile advice"),
    "sparse_learning": ("yes", "loop in train(), model rebuilt per --iters round: cudnn/tf32, channels_last, compile "
                        "there; loader advice right (get_cifar10_dataloaders in sparselearning/utils.py, another "
                        "module); bf16 advice (apex optimizer.backward); cudnn_benchmark forced by the plan (set at "
                        "import)"),
    "lightweight_gan": ("yes", "no patch: cli.py calls Trainer (lightweight_gan.py), whose train() runs G and D "
                        "steps in gradient-accumulation loops with its own GradScaler/amp and EMA (not located)"),
    "byol_lightning": ("yes", "no patch: Lightning's trainer.fit runs the loop (advice)"),
    "accelerate_nlp": ("yes", "no patch: accelerator.backward, loaders from get_dataloaders(...) then "
                       "accelerator.prepare(...), mixed precision is accelerate's own option (advice)"),
    "diffusion_policy": ("yes", "no patch: hydra builds a workspace class whose run() trains (advice)"),
    "controlnet": ("yes", "no patch: Lightning's trainer.fit runs the loop (advice)"),
    "tabm_notebook": ("yes", "exported notebook: cudnn/tf32 before model = tabm.TabM.make(...) (an MLP: harmless); "
                      "its own autocast (amp_enabled = False and ...) and torch.compile switches named in advice; "
                      "batches are device tensors split by randperm: loader advice right"),
    "ctgan_tvae": ("yes", "CPU by design (device='cpu'): no patch; the loop is TVAESynthesizer.fit in the "
                   "CTGAN package, not located"),
}


def export_notebook(path: Path) -> Path:
    """A ``.ipynb`` as ``jupyter nbconvert --to script`` exports it, written beside it; other paths as
    they are."""
    if path.suffix != ".ipynb":
        return path
    cells = json.loads(path.read_text(encoding="utf-8"))["cells"]
    out = ["#!/usr/bin/env python", "# coding: utf-8", ""]
    for n, cell in enumerate((c for c in cells if c["cell_type"] == "code"), 1):
        src = "".join(cell["source"]).splitlines()
        lines = [f"get_ipython().system({line.strip()[1:]!r})" if line.strip().startswith("!")
                 else f"get_ipython().run_line_magic({line.strip()[1:].partition(' ')[0]!r}, "
                      f"{line.strip()[1:].partition(' ')[2]!r})" if line.strip().startswith("%")
                 else line for line in src]
        out += [f"# In[{n}]:", "", "", *lines, "", ""]
    dest = path.with_suffix(".py")
    dest.write_text("\n".join(out) + "\n", encoding="utf-8")
    return dest
