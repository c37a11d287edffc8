"""In-process probes that ``gpudoctor run`` injects into an unmodified training script.

How they get in: :mod:`gpudoctor.collectors.launch` prepends :data:`SITE_DIR` (a directory that
holds only ``sitecustomize.py``) to the child's ``PYTHONPATH``. Python imports ``sitecustomize``
at start-up in every interpreter the child starts — so every rank torchrun launches gets the
probes too. The sitecustomize does nothing unless :data:`ENV_RUN_DIR` is set, chains to any
``sitecustomize`` that was already on the path, and installs the probes only when the script
imports ``torch`` (a script that never imports torch pays nothing).

Environment contract (set by the launcher, read by the probes):

* ``GPUDOCTOR_RUN_DIR`` — the run directory; unset means "inert".
* ``GPUDOCTOR_STEPS`` — stop after this many optimizer steps (empty: run to the end).
* ``GPUDOCTOR_PROFILE`` — ``"first:last"`` optimizer steps of the profiler window, or empty.
* ``GPUDOCTOR_KEEP_TRACE`` — ``"1"`` writes the window's Chrome trace into the run directory.
* ``GPUDOCTOR_TRACE_DIR`` — also write the window's trace there, in the layout of
  ``torch.profiler.tensorboard_trace_handler`` (``--trace-dir``).
* ``GPUDOCTOR_NVTX`` — ``"1"``: NVTX ranges around each step, optimizer step and data wait (``--nvtx``).
* ``GPUDOCTOR_KNOBS`` — the ``--try`` knobs, see :mod:`gpudoctor.collectors.knobs`.
* ``GPUDOCTOR_MEMORY_STAGES`` — memory mode (``gpudoctor memory run``): probe the allocator at
  each stage of the first N optimizer steps (empty or ``0``: off, the default).
* ``GPUDOCTOR_MEMORY_MODULES`` — ``"1"`` with memory mode: each module's forward memory in one
  probed step (``memory run --modules``).

Set by the probes themselves, for the interpreters below them (which ones are probed: see the
``sitecustomize``):

* ``GPUDOCTOR_OWNER_PID`` — the nearest probed process above; ``GPUDOCTOR_OWNER_ELASTIC`` —
  ``"1"`` when that process is itself a ``torchrun`` worker.
* ``GPUDOCTOR_SPAWN_PARENT`` — set only while ``torch.multiprocessing`` starts its ranks.
"""

from __future__ import annotations

from pathlib import Path

SITE_DIR = Path(__file__).resolve().parent / "site"

ENV_RUN_DIR = "GPUDOCTOR_RUN_DIR"
ENV_STEPS = "GPUDOCTOR_STEPS"
ENV_PROFILE = "GPUDOCTOR_PROFILE"
ENV_KEEP_TRACE = "GPUDOCTOR_KEEP_TRACE"
ENV_KNOBS = "GPUDOCTOR_KNOBS"
ENV_TRACE_DIR = "GPUDOCTOR_TRACE_DIR"
ENV_NVTX = "GPUDOCTOR_NVTX"
ENV_PKG_ROOT = "GPUDOCTOR_PKG_ROOT"
ENV_MEMORY_STAGES = "GPUDOCTOR_MEMORY_STAGES"
ENV_MEMORY_MODULES = "GPUDOCTOR_MEMORY_MODULES"  # memory mode: per-module forward memory, one step
ENV_OWNER_PID = "GPUDOCTOR_OWNER_PID"
ENV_OWNER_ELASTIC = "GPUDOCTOR_OWNER_ELASTIC"
ENV_SPAWN_PARENT = "GPUDOCTOR_SPAWN_PARENT"
