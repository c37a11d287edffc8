"""Symptoms told in words: one case per entry of the seeds' troubleshooting handbooks
(the seed articles: 000 §6 Q1-Q10, 001 §3.4 / §5.1, 002 §5.1-5.4) and the issue's own wordings,
in English and, where natural, in the handbooks' Chinese. Prose that mentions a GPU but describes
no failure gets no answer."""

from __future__ import annotations

import pytest

from gpudoctor.explain import explain_text

HANDBOOK = [
    # 000 §6 Q1: CUDA out of memory although nvidia-smi shows enough free memory -> fragmentation
    ("CUDA out of memory, but nvidia-smi shows plenty of free memory", "oom-fragmentation"),
    ("CUDA out of memory，但nvidia-smi显示显存充足", "oom-fragmentation"),
    # 000 §6 Q2 / the issue: memory creeps up every iteration until OOM
    ("GPU memory grows slowly during training and finally OOM", "gpu-memory-leak"),
    ("memory grows every iteration", "gpu-memory-leak"),
    ("训练中显存缓慢上涨，最终OOM", "gpu-memory-leak"),
    # 000 §6 Q3
    ("RuntimeError: CUDA error: device-side assert triggered", "device-side-assert"),
    # 000 §6 Q4: GPU util < 50% while the CPU is at 100%
    ("GPU utilization below 50% while CPU usage is 100%", "low-gpu-utilization"),
    ("GPU利用率<50%，CPU占用率100%", "low-gpu-utilization"),
    # 000 §6 Q5
    ("training speed drops as epochs go on", "training-slows-down"),
    ("训练速度随epoch增加而下降", "training-slows-down"),
    # 000 §6 Q6 / the issue
    ("8 GPUs train only 2x faster than one", "multi-gpu-no-speedup"),
    ("multi-GPU training speed does not scale linearly with the number of GPUs", "multi-gpu-no-speedup"),
    ("多卡训练速度不随GPU数线性增长", "multi-gpu-no-speedup"),
    # 000 §6 Q7 / the issue
    ("loss suddenly becomes nan", "nan-loss"),
    ("loss becomes nan after 3000 iterations", "nan-loss"),
    ("loss突然变为nan", "nan-loss"),
    # 000 §6 Q8
    ("gradient norm is 0 or extremely large", "grad-norm-nonfinite"),
    ("梯度norm为0或极大", "grad-norm-nonfinite"),
    # 000 §6 Q9
    ("ImportError: libcudnn.so.8: cannot open shared object file: No such file or directory",
     "cuda-library-not-found"),
    # 000 §6 Q10: segfault only with num_workers > 0
    ("Segmentation fault (core dumped) when num_workers > 0, fine with num_workers=0",
     "dataloader-worker-segfault"),
    # 001 §3.4 / the issue: memory full, GPU-Util 0%
    ("GPU-Util 0% while memory is full", "low-gpu-utilization"),
    ("显存占着但利用率是0", "low-gpu-utilization"),
    # 001 §5.1: DataParallel on two GPUs slower than one
    ("DataParallel with 2 GPUs is slower than a single GPU", "multi-gpu-no-speedup"),
    # 002 §5.1 row 1: OOM although nvidia-smi shows 50% in use -> leftover CUDA contexts (zombies)
    ("CUDA out of memory but nvidia-smi shows only 50% memory used", "oom-shared-gpu"),
    # 002 §5.1 row 2: nvidia-smi 100% but memory_allocated() is 0 -> the caching allocator's cache
    ("nvidia-smi shows 100% memory used but torch.cuda.memory_allocated() is 0",
     "memory-held-by-cache"),
    # 002 §5.1 row 3: one GPU fine, OOM with two -> no DistributedSampler / every rank on GPU 0
    ("single GPU works but OOM when training on two GPUs", "oom-only-multi-gpu"),
    ("单卡正常双卡训练时 OOM", "oom-only-multi-gpu"),
    # 002 §5.2 / the issue: a hang in the first collective with no error
    ("training hangs at the first all-reduce", "nccl-hang-p2p"),
    ("NCCL hangs with no error", "nccl-hang-p2p"),
    ("多卡训练卡在 init_process_group 之后的第一个 all_reduce，没有报错", "nccl-hang-p2p"),
    # 002 §5.3: AMP loss turns inf or nan
    ("after enabling AMP the loss suddenly becomes inf", "nan-loss"),
    # 002 §5.4: DDP communication overhead
    ("DDP adds 30% communication overhead on 8 GPUs", "multi-gpu-no-speedup"),
    # 002 §5.4 tip: "Expected all tensors to be on the same device" only with several GPUs
    ("Expected all tensors to be on the same device, but found at least two devices, cuda:0 and cpu!",
     "tensors-on-different-devices"),
    # the issue: OOM right after resuming from a checkpoint
    ("OOM when resuming from a checkpoint", "oom-on-resume"),
    ("CUDA out of memory after loading the checkpoint to resume training", "oom-on-resume"),
]

NEAR_MISSES = [
    "I bought a new GPU, an RTX 4090, and installed the driver.",
    "How do I use two GPUs with PyTorch?",
    "Training on 8 GPUs with DDP, loss 2.31 at step 1200.",
    "nvidia-smi shows 8 H100 GPUs with 80 GB memory each.",
    "We resumed from the checkpoint at step 5000 and training continues normally.",
    "GPU memory usage is 40 GB of 80 GB, utilization 98%.",
    "我有两张显卡，想用DDP训练。",
]


@pytest.mark.parametrize(("text", "expected"), HANDBOOK, ids=[t[:40] for t, _ in HANDBOOK])
def test_handbook_symptom_is_named(text: str, expected: str) -> None:
    ids = [m.entry_id for m in explain_text(text).matches]
    assert ids and ids[0] == expected, ids


@pytest.mark.parametrize("text", NEAR_MISSES)
def test_prose_without_a_failure_gets_no_answer(text: str) -> None:
    assert [m.entry_id for m in explain_text(text).matches] == []
