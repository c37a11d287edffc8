"""What host work is, by the library it runs in, and the fix that fits each kind.

A sampled frame (:class:`~gpudoctor.analysis.host_work.FrameCost`) names the script's function
and the innermost library frame under it; the library says what kind of work it is (the model
running outside the training step, an image written, a log line, serialization), and each kind
has its fix: less often, or off the training thread. Table-driven: a new library is a row.
"""

from __future__ import annotations

from gpudoctor.records.step import OP_GC, OP_LOAD, OP_SAVE

# (kind, module prefixes of the innermost library frame); the first match wins
KINDS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("serialization", ("torch.serialization", "torch.distributed.checkpoint", "safetensors", "pickle",
                       "numpy.lib.npyio", "h5py")),
    ("image", ("PIL", "matplotlib", "imageio", "cv2", "torchvision.utils", "torchvision.io")),
    ("logging", ("logging", "json", "csv", "torch.utils.tensorboard", "tensorboard", "wandb", "mlflow",
                 "builtins.print")),
    ("model", ("torch",)),
)


def kind_of(lib: str) -> str:
    """The kind of work a library frame (``module.function``) does; ``other`` when unknown."""
    for kind, prefixes in KINDS:
        if any(lib == p or lib.startswith(p + ".") for p in prefixes):
            return kind
    return "other"


def dur(ms: float) -> str:
    """``1.9 s`` or ``120 ms``: the size of host work, to two figures."""
    return f"{ms / 1000:.1f} s" if ms >= 1000 else f"{ms:.0f} ms" if ms >= 10 else f"{ms:.1f} ms"


def save_fix(every: str) -> str:
    return (f"# the checkpoint blocks the training thread {every}: save less often, or off it\n"
            "if step % save_every == 0:                 # fewer saves (every N steps or minutes)\n"
            "    save_checkpoint(step)\n"
            "# or asynchronously: the copy to CPU is short, the write runs in the background\n"
            "import torch.distributed.checkpoint as dcp\n"
            "pending = dcp.async_save(state_dict, checkpoint_id=path)  # pending.result() before the next\n"
            "# or by hand: copy to CPU on the training thread, write on another\n"
            "cpu = {k: v.detach().cpu() for k, v in model.state_dict().items()}\n"
            "threading.Thread(target=torch.save, args=(cpu, path)).start()")


LOAD_FIX = ("# load once before the loop and keep the result in memory, or load in a DataLoader\n"
            "# worker (num_workers > 0) so the training thread does not wait for the file\n"
            "state = torch.load(path, map_location=\"cpu\", mmap=True)   # mmap: pages read on demand")

GC_FIX = ("import gc\n"
          "# after model, optimizer and data are built, before the loop: the long-lived objects\n"
          "# leave the collector's scans, so a full collection no longer walks them\n"
          "gc.collect()\n"
          "gc.freeze()\n"
          "# and collect less often (the default is 700, 10, 10)\n"
          "gc.set_threshold(50_000, 50, 100)\n"
          "# also: keep fewer Python objects per step (lists of tensors, dicts of metrics)")


def op_fix(op: str, every: str) -> str:
    """The fix for a named operation (``HostOp.op``) done ``every`` (``every ~20 steps``)."""
    return {OP_SAVE: save_fix(every), OP_LOAD: LOAD_FIX, OP_GC: GC_FIX}.get(op, save_fix(every))


def frame_fix(kind: str, function: str) -> str:
    """The fix for the script's function ``function`` doing ``kind`` of work every N steps."""
    if kind == "model":
        return (f"# {function} runs the model outside the training step (evaluation, sampling):\n"
                "# every few hundred steps or once an epoch, on fewer batches, without autograd\n"
                f"if step % eval_every == 0:\n"
                "    with torch.inference_mode():\n"
                f"        {function}(...)")
    if kind == "image":
        return (f"# {function} writes images on the training thread: less often, or on a thread\n"
                "# (copy the tensor to the CPU first, then hand it over)\n"
                "img = grid.detach().cpu()\n"
                "threading.Thread(target=torchvision.utils.save_image, args=(img, path)).start()")
    if kind == "logging":
        return (f"# {function} logs on the training thread: less often, or through a queue\n"
                "# (logging.handlers.QueueHandler, an asynchronous tracker)\n"
                "if step % log_every == 0:\n"
                f"    {function}(...)")
    if kind == "serialization":
        return save_fix("every few steps")
    return (f"# {function} runs on the training thread every few steps: less often, or on a thread\n"
            "if step % every == 0:\n"
            f"    {function}(...)")


__all__ = ["GC_FIX", "KINDS", "LOAD_FIX", "dur", "frame_fix", "kind_of", "op_fix", "save_fix"]
