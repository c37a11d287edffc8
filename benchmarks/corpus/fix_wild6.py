"""Round six of ``fix_wild.py`` (``--set 6``): the held-out test of the script's-own-switches and
frameworks rules (``gpudoctor.fix.switches``, ``gpudoctor.fix.frameworks``): public scripts used in
none of rounds one to five nor the corpus, weighted to scripts WITH their own performance flags
(timm/DeiT-derived ``--amp``, ``--channels-last``, ``--pin-mem``, ``--use_amp`` str2bool, YACS
``AMP`` configs) or framework settings (Accelerate ``--mixed_precision`` / ``--allow_tf32`` /
``--dataloader_num_workers``, Hydra + Lightning), plus two with no such flags as controls.

Held out from the rule changes made after it: ``wild6-cpu-before.md`` is the picture before them.
Kept apart from the harness (``fix_wild.py`` imports these and makes its ``Wild`` rows of them):
name, mirror (owner/name), script path, why it is not run on this CPU. ``WHOLE6``: mirrors
extracted whole (a script under ``tools/`` or ``src/`` importing the project from the root).
"""

from __future__ import annotations

WILD6: tuple[tuple[str, str, str, str], ...] = (
    ("convnextv2", "facebookresearch/ConvNeXt-V2", "main_finetune.py", "needs timm 0.3.2, MinkowskiEngine, ImageNet"),
    ("internimage", "OpenGVLab/InternImage", "classification/main.py", "builds DCNv3 CUDA ops, yacs, NCCL"),
    ("poolformer", "sail-sg/poolformer", "train.py", "needs timm 0.4.x, ImageNet folders"),
    ("vim", "hustvl/Vim", "vim/main.py", "mamba_ssm CUDA kernels, ImageNet folders"),
    ("levit", "facebookresearch/LeViT", "main.py", "needs timm 0.3.2, ImageNet folders"),
    ("mambavision", "NVlabs/MambaVision", "mambavision/train.py", "mamba_ssm CUDA kernels, ImageNet folders"),
    ("cvt", "microsoft/CvT", "tools/train.py", "yacs config, NCCL, ImageNet folders"),
    ("diffusers_t2i", "huggingface/diffusers", "examples/text_to_image/train_text_to_image.py",
     "accelerate, diffusers, downloads SD weights and a data set"),
    ("unet", "milesial/Pytorch-UNet", "train.py", "Carvana images, wandb"),
    ("lightning_hydra", "ashleve/lightning-hydra-template", "src/train.py", "lightning, hydra, rootutils, MNIST"),
    ("srresnet", "sgrvinod/a-PyTorch-Tutorial-to-Super-Resolution", "train_srresnet.py",
     "control (no flags): COCO JSON lists from create_data_lists"),
    ("ssd", "sgrvinod/a-PyTorch-Tutorial-to-Object-Detection", "train.py",
     "control (no flags): VOC JSON lists from create_data_lists"),
)
WHOLE6 = frozenset({"microsoft/CvT", "ashleve/lightning-hydra-template"})

# each plan's diff read by hand after this round's rule changes ("was": before them, wild6-cpu-before.md); a
# missed flag that implements a fix exactly counts against the plan (the round tests the switches rule)
JUDGED6: dict[str, tuple[str, str]] = {
    "convnextv2": ("yes", "--use_amp true right: type=str2bool, default False; engine_finetune.py's train_one_epoch "
                   "reads args.use_amp and autocasts under `if use_amp:` (fp16 with its NativeScaler: the change "
                   "says the dtype is the script's); --num_workers 10 and --pin_mem true already: loader advice "
                   "right; no channels_last/compile flag exists; cudnn.benchmark set"),
    "internimage": ("partly", "no patch (train_one_epoch a def of the file, amp_autocast/loss_scaler passed in); "
                    "--amp-opt-level defaults to O1: native fp16 autocast on already, right to leave; missed: bf16 "
                    "is config.AMP_TYPE (YACS, 'float16' by default), settable as --opts AMP_TYPE bfloat16"),
    "poolformer": ("yes", "--amp now found (was missed, 'partly'): it sets args.native_amp = True, which sets "
                   "use_amp = 'native', under which amp_autocast = torch.cuda.amp.autocast: fp16 with its NativeScaler, "
                   "the script's dtype (timm 0.4 has no --amp-dtype); --pin-mem (create_loader(pin_memory=...)) and "
                   "--channels-last (model and input) right; -j default 8 = the plan's 8, left"),
    "vim": ("yes", "--if_amp now the switch (was 'NO': its store_false twin --no_amp shares the dest, which was "
            "dropped as ambiguous): set_defaults(if_amp=False), `if args.if_amp: amp_autocast = "
            "torch.cuda.amp.autocast` (fp16 with its loss scaler); --pin-mem on (set_defaults), --num_workers 10: "
            "loader advice right"),
    "levit": ("yes", "no patch: loss_scaler(...) does the backward (as deit); its engine's autocast is commented "
              "out (`if True:  # with torch.cuda.amp.autocast():`) and no flag turns it on: bf16 advice is right "
              "to be advice though its reason is only 'loop not found'"),
    "mambavision": ("yes", "as poolformer: --amp now found through args.native_amp -> use_amp = 'native' -> "
                    "amp_autocast (was missed, 'partly'); --pin-mem and --channels-last right, -j 8 left"),
    "cvt": ("partly", "no patch: the loop is train_one_epoch in lib/core/function.py; missed: AMP.ENABLED (YACS, "
            "False) is the fix, given as the positional opts override `AMP.ENABLED True` (a config, not a flag)"),
    "diffusers_t2i": ("yes", "--dataloader_num_workers 8 (default 0), --allow_tf32 (guards allow_tf32 = True), "
                      "--mixed_precision bf16 (choices no/fp16/bf16, passed to Accelerator), compile as "
                      "Accelerator(dynamo_backend=\"inductor\"); cudnn.benchmark before the UNet is loaded (fixed "
                      "resolution); no channels_last flag exists; xformers attention is outside the kinds"),
    "unet": ("yes", "item no longer patched (was 'partly': epoch_loss += loss.detach() gained nothing, "
             "experiment.log(loss.item()) and pbar.set_postfix(loss.item()) sync the same loss every step): the "
             "advice says so; --amp right (train_model(amp=args.amp) -> torch.autocast(enabled=amp), fp16 with its "
             "GradScaler); loader via the **loader_args merge, persistent nested twice (as mnist_hogwild); its "
             "os.cpu_count() -> 8 only because the harness records 0 workers; channels_last done by the script "
             "already (the advice's reason, 'assignment not found', is weak)"),
    "lightning_hydra": ("partly", "now ++trainer.precision=bf16-mixed and ++trainer.benchmark=true (was 'loop not "
                        "found' advice): `trainer: Trainer = hydra.utils.instantiate(cfg.trainer, ...)` in train(cfg), "
                        "which the @hydra.main main(cfg) calls; right for configs/trainer/*.yaml (Lightning 2.x); "
                        "still missed: the loader is configs/data/mnist.yaml's num_workers: 0, pin_memory: False "
                        "(++data.num_workers=8 ++data.pin_memory=true): the advice names train_dataloader()"),
    "srresnet": ("yes", "control: cudnn/tf32/channels_last/compile after model.to(device) (model new or from the "
                 "checkpoint), loader on train_loader (workers 4 -> 8, pin kept), bf16 over model + MSELoss; "
                 "cudnn_benchmark only because the plan forces it (the script sets it at import)"),
    "ssd": ("yes", "control: as srresnet; bf16 over model(images) + MultiBoxLoss (its cross-entropy runs in fp32 "
            "under autocast); boxes/labels lists copied non_blocking (pinned by the loader)"),
}
