"""Out-of-memory recovery by micro-batch halving (Composer's auto-microbatching, done plainly).

When a step raises ``torch.OutOfMemoryError`` the loop frees what the failed attempt held, doubles
``split`` (each loader batch is cut into ``split`` micro-batches, so the micro-batch halves while the
effective batch stays the same through accumulation) and retries the same batches. Under torchrun
every rank must take the same decision, or the ranks' collectives stop matching and the job hangs:
the loop all-reduces an OOM flag (MAX) after each attempt. The error is classified by its type,
never by matching message strings.

:class:`OomCapture` keeps the evidence (``robust.oom_snapshot``): the allocator figures of every
OOM, and after a recovered one the allocation history, so that a repeat OOM (the one that usually
ends the run) is dumped with its allocation sites and the full snapshot for PyTorch's viewer.
"""

from __future__ import annotations

import shlex
import warnings
from pathlib import Path

import torch

from gpudoctor.core import memory_history as mh
from gpudoctor.core.memory import release_cached_memory
from gpudoctor.records.base import write_json
from gpudoctor.records.units import human_bytes
from gpudoctor.train.config import TrainConfig

HISTORY_STEPS = 100  # ``on_oom``: record allocation history for this many steps after an OOM
HISTORY_ENTRIES = 100_000  # alloc/free events kept (a ring buffer: the most recent steps)


def free_memory(optimizer: torch.optim.Optimizer) -> None:
    """Drop what a failed attempt holds: gradients, unreachable activations, cached blocks."""
    optimizer.zero_grad(set_to_none=True)
    release_cached_memory()  # only here, after an OOM: in the loop it would only slow steps


class MicroBatchSplit:
    """How many micro-batches each loader batch is cut into, and when to give up.

    Args:
        batch_size: samples per loader batch (per rank).
        min_micro_batch: do not split below this many samples.
    """

    def __init__(self, batch_size: int | None, min_micro_batch: int) -> None:
        self.batch_size = batch_size
        self.min_micro_batch = min_micro_batch
        self.split = 1

    def can_halve(self, observed: int | None = None) -> bool:
        """Whether :meth:`halve` would retry (``False``: it would give up)."""
        size = self.batch_size or observed or 0
        return size // (self.split * 2) >= self.min_micro_batch

    def halve(self, observed: int | None = None, note: str = "") -> None:
        """Double the split after an OOM; raise when the micro-batch would go below the minimum.

        ``observed``: the failed batch's size, used when the loader's batch size is unknown (an
        iterable of ready-made batches has no ``batch_size``). ``note``: appended to the warning
        or the error (where the OOM's evidence was written).
        """
        size = self.batch_size or observed or 0
        tail = f"; {note}" if note else ""
        if not self.can_halve(observed):
            raise torch.OutOfMemoryError(
                f"out of memory even at a micro-batch of {size // self.split} samples "
                f"(robust.min_micro_batch={self.min_micro_batch}); shrink the model's memory "
                f"(activation checkpointing, bf16, FSDP) or lower robust.min_micro_batch{tail}"
            )
        self.split *= 2
        warnings.warn(
            f"out of memory: retrying with micro-batch {size // self.split} "
            f"({self.split} micro-steps per loader batch; the effective batch is unchanged){tail}",
            RuntimeWarning,
            stacklevel=2,
        )


def oom_folder(oom_dir: str | None, checkpoint_dir: str | None) -> Path:
    """Where the OOM files go: ``robust.oom_dir``, else ``checkpoint.dir``, else ``./gpudoctor-oom``."""
    return Path(oom_dir or checkpoint_dir or "gpudoctor-oom")


def _uses_cuda_allocator(device: torch.device) -> bool:
    return device.type == "cuda"


class OomCapture:
    """The engine's out-of-memory evidence, per ``robust.oom_snapshot`` (see :class:`RobustConfig`).

    Costs nothing per step unless history is being recorded: the observer runs only inside a
    failing allocation, and :meth:`step_started` sets two attributes. Inert off CUDA (the CPU has
    no caching allocator to ask).

    Args:
        mode: ``off``, ``on_oom`` or ``always``.
        folder: where the files go (created at the first OOM).
        rank: the global rank, part of the file names.
        device: the training device.
    """

    def __init__(self, mode: str, folder: Path, rank: int, device: torch.device) -> None:
        self.mode, self.folder, self.rank, self.device = mode, Path(folder), rank, device
        self.enabled = mode != "off" and _uses_cuda_allocator(device)
        self.dump: mh.OomDump | None = None
        self.history_until: int | None = None  # ``on_oom``: the step where recording stops
        self.history_note = ""  # why history could not be recorded, if it could not
        self._owns_history = False
        self._seen = 0  # dumps already reported

    @classmethod
    def start_for(cls, config: TrainConfig, rank: int, device: torch.device) -> OomCapture:
        """The capture ``config.robust`` asks for, started (what ``Trainer.fit`` does first)."""
        rob = config.robust
        capture = cls(rob.oom_snapshot, oom_folder(rob.oom_dir, config.checkpoint.dir), rank, device)
        capture.start()
        return capture

    def start(self) -> None:
        """At the start of ``fit``: attach the observer; ``always``: start recording history."""
        if not self.enabled:
            return
        try:
            self.dump = mh.attach_oom_dump(self.folder, rank=self.rank, once=False, write_pickle=False)
        except Exception as exc:  # noqa: BLE001 - e.g. an allocator backend without observers
            self.history_note = f"no out-of-memory observer ({type(exc).__name__}: {exc})"
        if self.mode == "always":
            self._arm()
        elif self.dump is not None:
            self.dump.write_pickle = mh.history_enabled()  # someone else records: the pickle is worth it

    def _arm(self) -> bool:
        """Record allocation history (unless someone already does); ``True`` if it is recorded."""
        recording = mh.history_enabled()
        if not recording:
            try:
                recording = self._owns_history = mh.start_history(HISTORY_ENTRIES)
            except Exception as exc:  # noqa: BLE001 - e.g. backend:cudaMallocAsync has no history
                self.history_note = f"allocation history unavailable ({type(exc).__name__}: {exc})"
                recording = False
        if self.dump is not None:
            self.dump.write_pickle = recording
        return recording

    def step_started(self, step: int) -> None:
        """Keep the step for the files; end the ``on_oom`` recording window."""
        if self.dump is not None:
            self.dump.step = step
        if self._owns_history and self.history_until is not None and step >= self.history_until:
            mh.stop_history()
            self._owns_history, self.history_until = False, None
            if self.dump is not None:
                self.dump.write_pickle = mh.history_enabled()

    def on_oom(self, exc: BaseException, step: int, *, recovering: bool) -> str:
        """After an OOM: make sure its figures are written, arm history, say where things are.

        Returns the note for the retry warning or the final error (also added to ``exc`` when the
        engine gives up, so the traceback shows it). ``""`` when inert.
        """
        if not self.enabled:
            return ""
        snap, json_path = None, None
        if self.dump is not None and self.dump.dumps > self._seen:
            self._seen = self.dump.dumps  # the observer wrote this OOM, inside the allocation
            snap, json_path = self.dump.last, self.dump.json_path
        else:  # no observer saw it: the allocator's figures now (the request's size from the message)
            requested = mh.requested_from_message(str(exc))
            index = self.device.index if self.device.index is not None else torch.cuda.current_device()
            snap = mh.allocator_snapshot_now(index, requested_bytes=requested or 0, step=step)
            if snap is not None and requested is not None:
                json_path = self.folder / mh.oom_file_names(self.rank)[0]
                try:
                    self.folder.mkdir(parents=True, exist_ok=True)
                    write_json(json_path, snap, kind=mh.KIND_OOM)
                except OSError as err:
                    self.history_note, json_path = f"{json_path} not written ({err})", None
        armed = False
        if recovering and self.mode == "on_oom":
            armed = self._arm() and self._owns_history
            if armed:  # every further OOM extends the window
                self.history_until = step + HISTORY_STEPS
        note = self._note(snap, json_path, armed=armed)
        if not recovering and note and hasattr(exc, "add_note"):  # Python 3.11+: shown in the traceback
            exc.add_note(f"gpudoctor: {note}")
        return note

    def _note(self, snap, json_path: Path | None, *, armed: bool) -> str:
        parts = []
        if self.dump is not None and self.dump.error:
            parts.append(f"the OOM snapshot could not be written ({self.dump.error})")
        if snap is not None and snap.requested_bytes:
            parts.append(f"at the error: {mh.figures_line(snap)}")
        elif snap is not None:  # the request's size is unknown
            parts.append(f"after the error: {human_bytes(snap.allocated_bytes)} allocated, "
                         f"{human_bytes(snap.reserved_bytes)} reserved and "
                         f"{human_bytes(snap.device_free_bytes)} free of {human_bytes(snap.device_total_bytes)}")
        if json_path is not None:
            written = str(json_path)
            if snap is not None and snap.pickle_path:
                written += f" and {snap.pickle_path} (open it at {mh.VIEWER_URL})"
            parts.append(f"written: {written}")
            shown = shlex.quote(str(json_path))  # a path is pasted into a shell: quote it
            parts.append(f"top allocation sites and fixes: gpudoctor memory show {shown}")
        if armed:
            parts.append(f"recording allocation history until step {self.history_until}, "
                         "so a repeat OOM is written with its allocation sites")
        elif self.history_note:
            parts.append(self.history_note)
        return "; ".join(parts)

    def close(self) -> None:
        """At the end of ``fit`` (also after an error): stop what this capture started."""
        if self.dump is not None:
            self.dump.detach()
            self.dump = None
        if self._owns_history:
            mh.stop_history()
            self._owns_history = False
