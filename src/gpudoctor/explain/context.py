"""Name the situation a failure was raised in, from its structure, and the advice that situation
changes: an OOM under ``evaluate()`` without ``no_grad`` is a graph kept for nothing, an OOM in
``optimizer.step()`` is optimizer state, one at ``torch.load`` is a checkpoint materialised on the GPU.

Situations are detected from frames (function names, files), the source lines a traceback echoes,
and the nearby text; an entry may also *require* one (``context = "dataloader-worker"`` in the
catalog). The advice is data (:data:`ADVICE`): a note shown first and fix lines put first.
"""

from __future__ import annotations

import dataclasses
import re

from gpudoctor.explain.structure import FailureStructure

# function names of evaluation code (exact, lower-cased), and name parts that mark it
EVAL_FUNCTIONS = frozenset({
    "val_step", "validation_step", "test_step", "predict_step", "prediction_step", "eval_step",
    "evaluation_loop", "test", "valid", "inference", "run_validation", "sample", "generate",
})
EVAL_PARTS = ("eval", "valid")
# frames / code that show autograd is off: torch's no_grad decorator runs the function through
# _contextlib's decorate_context
NO_GRAD_MARKS = ("no_grad", "inference_mode", "decorate_context", "set_grad_enabled(false)")
OPTIMIZER_FUNCTIONS = frozenset({
    "_init_group", "_init_state", "init_state", "_single_tensor_adam", "_multi_tensor_adam",
    "_single_tensor_adamw", "_multi_tensor_adamw", "_fused_adam", "_fused_adamw", "adam", "adamw",
    "initialize_optimizer_states", "_init_optimizer_state",
})
OPTIMIZER_CODE = re.compile(r"\b(?:optim\w*|opt|scaler)\.step\(|\bstate\[[\"']exp_avg")
LOAD_FUNCTIONS = frozenset({"load_state_dict", "_load", "load_checkpoint", "_load_from_state_dict",
                            "persistent_load", "restore_checkpoint", "_legacy_load"})
LOAD_CODE = re.compile(r"\btorch\.load\(|\.load_state_dict\(|\bload_checkpoint\(")
COLLECTIVE_FUNCTIONS = frozenset({
    "all_reduce", "all_gather", "broadcast", "reduce_scatter", "barrier", "_all_gather_base",
    "all_gather_into_tensor", "reduce_scatter_tensor", "_reduce_scatter_base", "all_to_all",
    "all_to_all_single", "broadcast_object_list", "all_gather_object", "_sync_params_and_buffers",
    "_verify_params_across_processes", "_broadcast_coalesced",
})
WORKER_MARKS = ("in dataloader worker process", "original traceback (most recent call last)")
WORKER_FUNCTIONS = frozenset({"_worker_loop", "__getitem__", "__getitems__", "collate_fn", "fetch"})
# an fp16 loss scaler at work, anywhere in the log before the failure
FP16_MARKS = ("gradscaler", "loss scale", "loss_scale", "loss scaler", "skipping step", "fp16",
              "16-mixed", "native amp", "torch.cuda.amp", "torch.amp", "half precision", "apex")
FP16_LOOKBACK_CHARS = 2_000_000
SITUATIONS = ("eval", "eval-no-grad", "optimizer", "load", "collective", "dataloader-worker", "fp16")


def detect(structure: FailureStructure, before: str) -> frozenset[str]:
    """The situations visible for a failure: ``eval``, ``eval-no-grad``, ``optimizer``, ``load``,
    ``collective``, ``dataloader-worker``, ``fp16``. ``before`` is the lower-cased log text up to
    the failure (for situations set up long before it, like a GradScaler)."""
    names = structure.functions
    files = " ".join(f.file.lower() for f in structure.frames)
    code = structure.code
    found: set[str] = set()
    if any(n in EVAL_FUNCTIONS or any(p in n for p in EVAL_PARTS) for n in names):
        no_grad = any(m in code or m in names for m in NO_GRAD_MARKS)
        found.add("eval-no-grad" if no_grad else "eval")
    if (any(n in OPTIMIZER_FUNCTIONS for n in names) or "torch/optim/" in files
            or OPTIMIZER_CODE.search(code)):
        found.add("optimizer")
    if (any(n in LOAD_FUNCTIONS or n.startswith("resume") for n in names)
            or "serialization.py" in files or LOAD_CODE.search(code)):
        found.add("load")
    if any(n in COLLECTIVE_FUNCTIONS for n in names) or "distributed_c10d.py" in files:
        found.add("collective")
    if any(n in WORKER_FUNCTIONS for n in names) or any(m in structure.nearby for m in WORKER_MARKS):
        found.add("dataloader-worker")
    tail = before[-FP16_LOOKBACK_CHARS:]
    if any(m in tail for m in FP16_MARKS):
        found.add("fp16")
    return frozenset(found)


@dataclasses.dataclass(frozen=True, slots=True)
class Advice:
    """What a situation adds to the explanation of the entries it concerns."""

    situation: str
    entries: tuple[str, ...]
    note: str
    fix: tuple[str, ...]


OOM_ENTRIES = ("oom-caching-allocator", "oom-fragmentation", "oom-request-exceeds-gpu",
               "oom-shared-gpu", "cuda-error-out-of-memory", "oom-nvml-assert")
NAN_ENTRIES = ("nan-loss", "grad-norm-nonfinite", "fp16-gradient-overflow", "nan-in-backward")

ADVICE: tuple[Advice, ...] = (
    Advice("eval", OOM_ENTRIES,
           "raised under an evaluation frame with no torch.no_grad() in sight: evaluation is building "
           "an autograd graph it never uses",
           ("wrap evaluation in torch.no_grad() or torch.inference_mode() (and call model.eval()); "
            "activations are then freed layer by layer",
            "use a smaller eval batch size than the training one if it still does not fit; move "
            "collected outputs to the CPU (.detach().cpu()) instead of keeping them on the GPU")),
    Advice("eval-no-grad", OOM_ENTRIES,
           "raised during evaluation, already under no_grad: the eval batch (or outputs kept across "
           "eval steps) is too large",
           ("lower the eval-time batch size (per_device_eval_batch_size, the val DataLoader's batch_size)",
            "move collected predictions to the CPU each step (.cpu()) instead of concatenating on the GPU")),
    Advice("optimizer", OOM_ENTRIES,
           "raised in optimizer.step() / optimizer state init: the first step allocates the optimizer's "
           "state (Adam/AdamW keep 2 fp32 tensors per parameter: 8 extra bytes per parameter)",
           ("budget for optimizer state: Adam adds 2x the parameter memory in fp32; use an 8-bit optimizer "
            "(bitsandbytes Adam8bit), or a lighter one (Adafactor, SGD)",
            "foreach=False (or fused=True) avoids the multi-tensor step's temporary copies of all parameters",
            "shard optimizer state across GPUs: ZeRO stage 1/2 (DeepSpeed), FSDP or ZeroRedundancyOptimizer")),
    Advice("load", OOM_ENTRIES,
           "raised while loading a checkpoint: torch.load puts every tensor back on the GPU it was "
           "saved from, next to the model that already lives there",
           ("torch.load(path, map_location=\"cpu\") and then model.load_state_dict(...): the weights go to "
            "the model's own memory, not a second GPU copy",
            "free the checkpoint dict after loading (del checkpoint; gc.collect(); torch.cuda.empty_cache()) "
            "before training resumes, including the optimizer state you restored")),
    Advice("collective", OOM_ENTRIES,
           "raised inside a collective (all_reduce / broadcast / all_gather): NCCL allocates its "
           "communication buffers on the GPU on first use",
           ("leave headroom for NCCL's buffers (lower the batch a little, or NCCL_BUFFSIZE); check that "
            "every rank uses its own GPU (torch.cuda.set_device(local_rank))",)),
    Advice("fp16", NAN_ENTRIES,
           "an fp16 loss scaler is in use: an occasional nan/inf grad norm with a skipped step is normal "
           "under dynamic loss scaling (the scaler lowers the scale and retries); a persistent one is not",
           ("if nan/inf repeats step after step while the loss scale keeps falling, it is a real overflow: "
            "switch to bf16, compute the loss in fp32, lower the learning rate or add warmup",)),
)


def advise(entry_id: str, situations: frozenset[str]) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """``(notes, fix lines)`` the situations add for ``entry_id``, in the order of :data:`ADVICE`."""
    notes: list[str] = []
    fixes: list[str] = []
    for advice in ADVICE:
        if advice.situation in situations and entry_id in advice.entries:
            notes.append(advice.note)
            fixes.extend(advice.fix)
    return tuple(notes), tuple(fixes)
