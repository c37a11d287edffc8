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

# each plan's diff read by hand after this round's rule changes ("was": before them; wild3-cpu-before.md)
JUDGED3: dict[str, tuple[str, str]] = {
    "moco_v3": ("yes", "-j default 32 -> 8 for the one process this plan measures; main_worker divides args.workers "
                "by the GPUs per node (line 207), so the comment says it is a total per node and to set N x 8 for N "
                "processes, and a run measured on 8 processes sets 64 (round four; was 'partly': 8 as if per "
                "process, 1 worker each on 8 GPUs); persistent/prefetch on train_loader right; channels_last + "
                "compile before the DDP wrap (right); bf16 advice: autocast already"),
    "deit": ("yes", "no patch: the backward is inside timm's NativeScaler (loss_scaler(loss, optimizer)) in "
             "engine.py, so no loop is located; autocast already"),
    "mae_pretrain": ("yes", "no patch: as deit, loss_scaler(...) in engine_pretrain.py does the backward"),
    "dit": ("yes", "set_epoch advice: the epoch loop calls sampler.set_epoch(epoch) already (was a duplicate line "
            "inserted: NO); loader via the --num-workers default (4 -> 8) + persistent, non_blocking on x, y: right; "
            "compile after the DDP wrap; bf16 advice: the model is an argument of diffusion.training_losses"),
    "stylegan2": ("yes", "bf16 advice: the project's own CUDA ops (op/: cpp_extension.load, "
                  "AT_DISPATCH_FLOATING_TYPES_AND_HALF) would get bf16 tensors they do not dispatch (was autocast "
                  "over the discriminator's forward: NO, raises at step 1); tf32/cudnn between the generator and discriminator (harmless); "
                  "compile advice: r1/path penalties differentiate twice"),
    "img_captioning": ("yes", "num_workers=workers kept (the script: 'only 1 works with h5py'; CaptionDataset "
                       "opens h5py.File in __init__, shared by forked workers; was a literal 8: NO), pin/persistent/"
                       "prefetch guarded by workers > 0; non_blocking on imgs/caps/caplens right; val_loader untouched"),
    "dino": ("yes", "no patch: the loop iterates metric_logger.log_every(data_loader, ...), fp16 scaler already"),
    "swav": ("yes", "loader via the --workers default (10 -> 8): `global args` parsed in main now traced (was a "
             "literal 8 on the call, --workers ignored); channels_last and compile on the module before the DDP "
             "wrap (were after it, before the multi-model rules merged); compile over apex.amp O1 (unmeasured); "
             "bf16 advice right (apex amp already)"),
    "minrf": ("yes", "loader (MNIST in memory, 8 workers) + non_blocking on x, c; channels_last + compile on "
              "DiT_Llama; bf16 advice: the model is called inside rf.forward (RF wrapper)"),
    "llmc_gpt2": ("yes", "no patch is right: its own --compile switch, autocast already, DistributedDataLoader "
                  "next_batch() (no DataLoader)"),
    "convnext": ("yes", "no patch: train_one_epoch in engine.py iterates metric_logger.log_every(...); "
                 "autocast already"),
    "mingpt_ddp": ("yes", "no patch: the loop in trainer.py reads self.train_loader through a conditional; "
                   "autocast already (use_amp)"),
}
