"""Round three of ``fix_wild.py`` (``--set 3``): public scripts used in neither round one nor two.

Held out from the rule changes made after it: ``wild3-cpu-before.md`` is the picture before them.
Kept apart from the harness (``fix_wild.py`` imports these and makes its ``Wild`` rows of them):
name, mirror (owner/name), script path, why it is not run on this CPU.
"""

from __future__ import annotations

WILD3: tuple[tuple[str, str, str, str], ...] = (
    ("moco_v3", "facebookresearch/moco-v3", "main_moco.py", "NCCL, ImageNet folders"),
    ("deit", "facebookresearch/deit", "main.py", "needs timm, ImageNet folders"),
    ("mae_pretrain", "facebookresearch/mae", "main_pretrain.py", "needs timm 0.3.2, ImageNet folders"),
    ("dit", "facebookresearch/DiT", "train.py", "NCCL, downloads the VAE (diffusers)"),
    ("stylegan2", "rosinality/stylegan2-pytorch", "train.py", "builds CUDA ops, needs an LMDB"),
    ("img_captioning", "sgrvinod/a-PyTorch-Tutorial-to-Image-Captioning", "train.py",
     "needs its prepared HDF5 files, downloads ResNet-101 weights"),
    ("dino", "facebookresearch/dino", "main_dino.py", "NCCL, ImageNet folders"),
    ("swav", "facebookresearch/swav", "main_swav.py", "NCCL, apex, ImageNet folders"),
    ("minrf", "cloneofsimo/minRF", "rf.py", "hard-coded .cuda(), wandb, downloads MNIST"),
    ("llmc_gpt2", "karpathy/llm.c", "train_gpt2.py", "needs tiktoken (downloads the GPT-2 encoding)"),
    ("convnext", "facebookresearch/ConvNeXt", "main.py", "needs timm, ImageNet folders"),
    ("mingpt_ddp", "pytorch/examples", "distributed/minGPT-ddp/mingpt/main.py",
     "hydra, torchrun, NCCL"),
)

# each plan's diff read by hand ("was": before this round's rule changes; wild3-cpu-before.md)
JUDGED3: dict[str, tuple[str, str]] = {
    "moco_v3": ("partly", "-j default lowered 32 -> 8, but main_worker divides args.workers by the GPUs per node "
                "(line 207): 8 GPUs get 1 worker each instead of 4; persistent/prefetch on train_loader right; "
                "channels_last + compile before the DDP wrap (right); bf16 advice: autocast already"),
    "deit": ("yes", "no patch: the backward is inside timm's NativeScaler (loss_scaler(loss, optimizer)) in "
             "engine.py, so no loop is located; autocast already"),
    "mae_pretrain": ("yes", "no patch: as deit, loss_scaler(...) in engine_pretrain.py does the backward"),
    "dit": ("NO", "set_epoch inserted in the epoch loop that already calls sampler.set_epoch(epoch) (a duplicate "
            "line); loader via the --num-workers default (4 -> 8) + persistent, non_blocking on x, y: right; "
            "compile after the DDP wrap; bf16 advice: the model is an argument of diffusion.training_losses"),
    "stylegan2": ("NO", "bf16 autocast over the discriminator's forward: the project's own CUDA ops (op/: "
                  "cpp_extension.load, AT_DISPATCH_FLOATING_TYPES_AND_HALF) get bf16 tensors they do not "
                  "dispatch (raises at step 1); tf32/cudnn between the generator and discriminator (harmless); "
                  "compile advice: r1/path penalties differentiate twice"),
    "img_captioning": ("NO", "num_workers=workers replaced by a literal 8: the script's module constant says "
                       "'only 1 works with h5py' (CaptionDataset opens h5py.File in __init__, shared by forked "
                       "workers); non_blocking on imgs/caps/caplens right; val_loader untouched"),
    "dino": ("yes", "no patch: the loop iterates metric_logger.log_every(data_loader, ...), fp16 scaler already"),
    "swav": ("partly", "num_workers=args.workers replaced by a literal 8 (args is `global args`, parsed in main: "
             "not traced, --workers no longer applies) while persistent reads args.workers; channels_last and "
             "compile after the DDP wrap (fixmulti's area); compile over apex.amp O1 (unmeasured); bf16 advice "
             "right (apex amp already)"),
    "minrf": ("yes", "loader (MNIST in memory, 8 workers) + non_blocking on x, c; channels_last + compile on "
              "DiT_Llama; bf16 advice: the model is called inside rf.forward (RF wrapper)"),
    "llmc_gpt2": ("yes", "no patch is right: its own --compile switch, autocast already, DistributedDataLoader "
                  "next_batch() (no DataLoader)"),
    "convnext": ("yes", "no patch: train_one_epoch in engine.py iterates metric_logger.log_every(...); "
                 "autocast already"),
    "mingpt_ddp": ("yes", "no patch: the loop in trainer.py reads self.train_loader through a conditional; "
                   "autocast already (use_amp)"),
}
