"""Round four of ``fix_wild.py`` (``--set 4``): public scripts used in none of rounds one to three
nor the corpus.

Held out from the rule changes made after it: ``wild4-cpu-before.md`` is the picture before them
(round three's moco-v3 ``-j`` defect, fixed before it, excepted). Kept apart from the harness
(``fix_wild.py`` imports these and makes its ``Wild`` rows of them): name, mirror (owner/name),
script path, why it is not run on this CPU. ``WHOLE``: mirrors extracted whole, not only the
script's top folder (a script under ``scripts/`` importing the project's package from the root).
"""

from __future__ import annotations

WILD4: tuple[tuple[str, str, str, str], ...] = (
    ("detr", "facebookresearch/detr", "main.py", "NCCL optional, COCO folders, downloads ResNet-50 weights"),
    ("improved_diffusion", "openai/improved-diffusion", "scripts/image_train.py", "NCCL (mpi4py), image folder"),
    ("edm", "NVlabs/edm", "train.py", "click, dnnlib, a zip data set, NCCL"),
    ("alpaca_lora", "tloen/alpaca-lora", "finetune.py", "downloads LLaMA-7B, peft, HF Trainer"),
    ("taming", "CompVis/taming-transformers", "main.py", "pytorch-lightning 1.x, omegaconf configs"),
    ("yolov3", "ultralytics/yolov3", "train.py", "downloads weights and COCO128"),
    ("ijepa", "facebookresearch/ijepa", "main.py", "NCCL, ImageNet folders, a YAML config"),
    ("swin", "microsoft/Swin-Transformer", "main.py", "needs timm, yacs, NCCL, ImageNet folders"),
    ("open_clip", "mlfoundations/open_clip", "src/open_clip_train/main.py", "webdataset shards or a CSV, NCCL"),
    ("modded_nanogpt", "KellerJordan/modded-nanogpt", "train_gpt.py", "8 GPUs, FineWeb shards, torch nightly"),
    ("stylegan2_ada", "NVlabs/stylegan2-ada-pytorch", "train.py", "builds CUDA ops, click, a zip data set"),
    ("resnest", "zhanghang1989/ResNeSt", "scripts/torch/train.py", "NCCL, ImageNet folders, fvcore config"),
)
WHOLE = frozenset({"openai/improved-diffusion", "zhanghang1989/ResNeSt"})

# each plan's diff read by hand after this round's rule changes ("was": before them; wild4-cpu-before.md)
JUDGED4: dict[str, tuple[str, str]] = {
    "detr": ("yes", "no patch: train_one_epoch in engine.py iterates metric_logger.log_every(data_loader, ...) "
             "(as dino); its misses: no autocast in DETR, loader built in main.py with --num_workers 2"),
    "improved_diffusion": ("yes", "no patch: the loop is TrainLoop.run_loop -> forward_backward, methods of a class "
                           "in train_util.py (backward in a microbatch loop); misses: num_workers=1 literal in "
                           "image_datasets.py load_data, its own --use_fp16"),
    "edm": ("yes", "no patch: `from training import training_loop` now resolves to training/training_loop.py (was "
            "'no .backward() inside a loop'); there the loss is backpropagated in the accumulation rounds of a "
            "while loop, but the net and optimizer come from dnnlib.util.construct_class_by_name and batches "
            "from next(dataset_iterator): advice names those"),
    "alpaca_lora": ("yes", "no patch: HF Trainer's train() runs the loop (advice)"),
    "taming": ("yes", "no patch: Lightning's trainer.fit runs the loop (advice)"),
    "yolov3": ("yes", "no patch: pbar = enumerate(train_loader) rebound to TQDM(pbar): loader advice; autocast "
               "already (check_amp); compile advice: nn.DataParallel; set_epoch advice (it calls it already)"),
    "ijepa": ("yes", "no patch: backward inside train_step(), a def in the loop's body called through "
              "gpu_timer(train_step)"),
    "swin": ("yes", "no patch: backward inside loss_scaler(loss, optimizer, ...) (timm's NativeScaler, as deit)"),
    "open_clip": ("yes", "no patch: dataloader = data['train'].dataloader (loader advice); autocast already; "
                  "compile advice names its own --torchcompile"),
    "modded_nanogpt": ("yes", "no patch: compiled, bf16/fp8 already; the loop steps its optimizers elsewhere "
                       "(advice: 'does not step an optimizer')"),
    "stylegan2_ada": ("yes", "no patch: training/training_loop.py now looked in (as edm), but its backward is in "
                      "loss.accumulate_gradients (training/loss.py), a phase loop over G/D; own CUDA ops"),
    "resnest": ("yes", "train() is a def nested in main_worker: model now found in the enclosing function (was "
                "compile/tf32 advice: 'assignment of the model before the loop was not found'): compile, cudnn "
                "benchmark and tf32 after model.cuda(), before the DDP wrap (as swav/vicreg); bf16 over "
                "model(data)+criterion (LabelSmoothing/NLLMultiLabelSmooth: log_softmax, autocast-safe); loader "
                "advice right (get_criterion rebinds train_loader for mixup); channels_last advice: the ResNeSt "
                "convs are built in resnest/torch/models, get_model's registry imports them (a miss)"),
}
