"""Per-rank probes: install, step boundaries, per-step records, lazy reads, writing at each step.

Everything on the hot path is host-side bookkeeping: counters, ``time.perf_counter``, a CUDA
event record, the allocator's host counters. Device values (GPU time, loss, scale) are read
lazily a step or more later (:class:`~gpudoctor.collectors.instrument.lazy.LazyValues`,
:class:`~gpudoctor.core.timing.CudaEventTimer`). The only waits happen when the run ends.

Step boundaries come from ``torch.optim.optimizer.register_optimizer_step_post_hook`` (every
optimizer, no change to the script). With several optimizers (a GAN) the first one that steps
defines the step, until another steps ``HANDOFF_STEPS`` times in a row without it (``state``).
GradScaler (inf/NaN gradients) skips a step in one of two ways:

* a plain optimizer: ``scaler.step`` never calls ``optimizer.step`` (its own found-inf
  ``.item()`` decided that on the host), so no hook fires; the GradScaler wrapper records the
  boundary itself, with ``scaler_skipped=True``;
* a fused optimizer (``fused=True``): ``optimizer.step`` runs and the kernel skips the update;
  the hook reads the scaler's device-side ``found_inf`` lazily, like the loss — no added sync,
  and the stopping step of ``--steps`` gets its flag too.

``--steps N``: after the N-th optimizer step every rank flushes its records and leaves with
``os._exit(0)`` from inside the hook. ``os._exit`` because user code may catch ``SystemExit``
(``except BaseException``) or hang in ``finally`` blocks and ``atexit`` handlers of libraries;
every rank counts the same optimizer steps, so all ranks stop after the same step, once the
collectives of that step are complete.
"""

from __future__ import annotations

import atexit
import os
import sys
import time
from pathlib import Path
from typing import Any

from gpudoctor.collectors.instrument import (
    ENV_KEEP_TRACE,
    ENV_MEMORY_STAGES,
    ENV_OWNER_ELASTIC,
    ENV_OWNER_PID,
    ENV_PROFILE,
    ENV_RUN_DIR,
    ENV_NVTX,
    ENV_STEPS,
    ENV_TRACE_DIR,
    compile_events,
    host_sampler,
    host_work,
    leak_probe,
)
from gpudoctor.collectors.instrument.state import S, is_owner
from gpudoctor.collectors.instrument.stepfile import flush_ready
from gpudoctor.records.base import to_dict

def install() -> None:
    """Read the environment and install every probe. Called once, right after ``import torch``."""
    if S.installed:
        return
    run_dir = os.environ.get(ENV_RUN_DIR)
    if not run_dir:
        return
    # Which interpreters get here is decided by the sitecustomize (the training processes only);
    # claim this one, so that the interpreters it starts know a probed process is above them.
    os.environ[ENV_OWNER_PID] = str(os.getpid())
    os.environ[ENV_OWNER_ELASTIC] = "1" if "TORCHELASTIC_RUN_ID" in os.environ else ""
    S.installed = True
    S.owner_pid = os.getpid()
    S.run_dir = Path(run_dir)
    S.rank = _env_int("RANK", 0)
    from gpudoctor.collectors.instrument import stackdump

    stackdump.install(S.run_dir, _env_int("RANK", -1))
    steps = os.environ.get(ENV_STEPS, "")
    S.steps_limit = int(steps) if steps else None
    window = os.environ.get(ENV_PROFILE, "")
    if window:
        first, last = (int(x) for x in window.split(":"))
        S.window = (first, last)
    S.keep_trace = os.environ.get(ENV_KEEP_TRACE) == "1"
    if os.environ.get(ENV_TRACE_DIR):
        S.seen.trace_dir = os.environ[ENV_TRACE_DIR]
    S.t_origin = S.t_last = time.perf_counter()

    from gpudoctor.collectors import knobs
    from gpudoctor.collectors.instrument import patches

    patches.install_all()
    import torch

    from gpudoctor.collectors.instrument import host_work

    host_work.install(torch)
    compile_events.install()
    knobs.apply_from_env()
    from gpudoctor.collectors.instrument import spawn

    spawn.install()
    if os.environ.get(ENV_NVTX) == "1":
        from gpudoctor.collectors.instrument import nvtx

        note = nvtx.install([])
        if note:
            print(f"gpudoctor: {note}", file=sys.stderr)

    import torch.optim.optimizer as optim_mod

    memory_stages = _env_int(ENV_MEMORY_STAGES, 0)  # unset or empty: 0
    if memory_stages > 0:
        from gpudoctor.collectors.instrument import memory_probe

        # Before the boundary hook: the last probed step's "optimizer" stage must be written
        # before the boundary may end the process (--steps).
        memory_probe.install(memory_stages)
    else:  # memory mode records history all run; plain run turns it on once a leak shows
        leak_probe.arm(S.window, S.steps_limit)
    optim_mod.register_optimizer_step_post_hook(_optimizer_post_hook)
    if S.window is not None:
        S.seen.prewarm_handle = optim_mod.register_optimizer_step_pre_hook(_prewarm_pre_hook)
    from gpudoctor.collectors.instrument import ending

    atexit.register(ending.finish, "exit")
    ending.install_sigterm()


def _env_int(name: str, default: int) -> int:
    try:
        return int(os.environ.get(name, default))
    except ValueError:
        return default


# ---- step boundaries -------------------------------------------------------------------------


def _prewarm_pre_hook(optimizer: Any, args: Any, kwargs: Any) -> None:
    """Once, inside the first optimizer step: initialise the profiler (start-up cost).

    The hook is removed at the step boundary, not here: torch is iterating the hook dict now.
    """
    if S.seen.prewarmed or not is_owner() or S.step > 0:
        return
    S.seen.prewarmed = True
    from gpudoctor.collectors import profiler_window

    was_quiet, S.quiet = S.quiet, True
    try:
        note = profiler_window.prewarm()
    finally:
        S.quiet = was_quiet
    if note:
        S.seen.window_note = note


def _is_primary(optimizer: Any) -> bool:
    """Step boundaries follow one optimizer: the first one seen stepping (or skipping)."""
    if not is_owner() or S.finished:
        return False
    return S.set_primary(optimizer)


def _optimizer_post_hook(optimizer: Any, args: Any, kwargs: Any) -> None:
    if not _is_primary(optimizer):
        return
    S.hook_fired = True
    if S.scaler_fused is not None:
        # A fused optimizer steps even when the gradients hold inf/NaN and skips the update
        # inside its kernel: whether it did is only on the device. Read the flag here, inside
        # the step, so the step's record gets it even when --steps stops the script right now.
        boundary(skipped=None, found_inf=_fused_found_inf(S.scaler_fused, optimizer))
    else:
        # Plain optimizer under an enabled GradScaler: it only calls optimizer.step() when no
        # inf/NaN was found, so reaching this hook means the step was taken.
        boundary(skipped=False if S.scaler_seen else None)


def _fused_found_inf(scaler: Any, optimizer: Any) -> Any:
    """The device tensor GradScaler handed a fused optimizer as its skip flag (> 0: skipped).

    ``GradScaler.step`` sets ``optimizer.found_inf`` (the sum of its per-device found-inf
    flags) for the duration of ``optimizer.step``; optimizers that still take the older
    ``grad_scaler=`` argument leave the flags in the scaler's per-optimizer state instead.
    Both are device tensors: nothing here waits for the GPU.
    """
    found = getattr(optimizer, "found_inf", None)
    if found is not None:
        return found
    states = getattr(scaler, "_per_optimizer_states", None) or {}
    flags = (states.get(id(optimizer)) or {}).get("found_inf_per_device") or {}
    return list(flags.values()) or None


def scaler_skipped_step(optimizer: Any) -> None:
    """Called by the GradScaler probe when ``scaler.step`` did not call ``optimizer.step``."""
    if _is_primary(optimizer):
        boundary(skipped=True)


def _compiled_frames_delta() -> int | None:
    """Frames TorchDynamo compiled since the last step boundary (its ``counters["frames"]["ok"]``),
    ``None`` while the script has not imported TorchDynamo (it is never imported here: that
    alone costs a second)."""
    utils = sys.modules.get("torch._dynamo.utils")
    if utils is None:
        return None
    try:
        total = int(utils.counters["frames"]["ok"])
    except Exception:  # noqa: BLE001 - a torch whose counters differ: not measured
        return None
    delta, S.compiled_frames = total - S.compiled_frames, total
    return delta


def boundary(*, skipped: bool | None, found_inf: Any = None) -> None:
    """End the current step: close its record, read what is ready, maybe flush or stop.

    Args:
        skipped: whether GradScaler skipped the step, when the host already knows it.
        found_inf: a fused optimizer's device-side skip flag (a tensor, or a list of per-device
            tensors), read lazily into ``scaler_skipped`` like the loss.
    """
    now = time.perf_counter()
    step = S.step
    was_quiet, S.quiet = S.quiet, True  # inside GradScaler.step the scaler's wrapper set it
    try:
        fields: dict[str, Any] = {
            "rank": S.rank,
            "step": step,
            "t_end_s": time.time(),
            "step_ms": (now - S.t_last) * 1000.0,
            "data_wait_ms": S.data_wait_s * 1000.0,
            "h2d_ms": S.h2d_s * 1000.0,
            "h2d_bytes": S.h2d_bytes,
            "h2d_pageable_bytes": S.h2d_pageable,
            "h2d_wide_float_bytes": S.h2d_wide_float,
            "h2d_copies": S.h2d_copies,
            "h2d_blocking_copies": S.h2d_blocking,
            "host_syncs": S.syncs,
            "sync_ms": S.sync_s * 1000.0,
            "samples": S.samples,
            "tokens": S.tokens,
            "micro_steps": max(S.backwards, 1),
            "empty_cache_calls": S.empty_cache,
            "compiles": _compiled_frames_delta(),
            "compile_ms": compile_events.take_step_ms(),
            "scaler_skipped": skipped,
        }
        host_work.end_step(fields, now - S.t_last)
        host_sampler.start()
        waiting: set[str] = set()
        S.pending[step] = fields
        S.waiting[step] = waiting
        _gpu_boundary(step, fields, waiting)
        loss = S.last_loss
        S.last_loss = None
        if loss is not None:
            waiting.update(("loss", "loss_finite"))
            _apply(S.lazy.push(step, "loss", loss, finite_field="loss_finite"))
        norm, S.last_grad_norm = S.last_grad_norm, None
        if norm is not None:  # the script's clip_grad_norm_ computed it: read it lazily too
            waiting.add("grad_norm")
            _apply(S.lazy.push(step, "grad_norm", norm))
        if found_inf is not None:
            if isinstance(found_inf, list):
                found_inf = sum(t.float() for t in found_inf)  # device ops: no sync
            waiting.add("scaler_skipped")
            _apply(S.lazy.push(step, "scaler_skipped", found_inf))
        _apply(S.lazy.poll())
        S.step = step + 1
        S.reset_step()
        _window_boundary(step)
        leak_probe.watch(step, fields.get("mem"))  # after the window's start or stop
        handle = S.seen.prewarm_handle if S.seen.prewarmed else None
        if handle is not None:
            S.seen.prewarm_handle = None
            handle.remove()  # safe here: the post hooks are being iterated, not the pre hooks
        if step == 0:
            S.seen.first_step_done = True
            from gpudoctor.collectors.instrument.ending import write_config

            write_config()
        flush_ready()
    finally:
        S.quiet = was_quiet
    if S.steps_limit is not None and S.step >= S.steps_limit:
        from gpudoctor.collectors.instrument.ending import stop

        stop()
    S.t_last = time.perf_counter()


def _gpu_boundary(step: int, fields: dict[str, Any], waiting: set[str]) -> None:
    import torch

    if not torch.cuda.is_initialized():
        return
    from gpudoctor.core.timing import CudaEventTimer

    if S.timer is None:
        S.timer = CudaEventTimer()
    if S.span_start is not None:  # the first step has no start event: its gpu_ms stays None
        S.timer.stop(S.span_start, tag=step)
        waiting.add("gpu_ms")
    S.span_start = S.timer.start()
    for tag, ms in S.timer.poll():  # never blocks
        _set(tag, "gpu_ms", ms)
    stats = _allocator_stats()
    fields["mem"] = to_dict(stats) if stats is not None else None


def _allocator_stats() -> Any:
    """Allocator counters for the current device: host-side reads, no device sync."""
    import torch

    from gpudoctor.core.memory import stats_from_mapping

    try:
        nested = torch.cuda.memory_stats_as_nested_dict()
    except Exception:  # noqa: BLE001 - a metric we cannot read is left out
        return None

    def cur(key: str, kind: str = "current") -> int:
        return int(nested.get(key, {}).get("all", {}).get(kind, 0))

    return stats_from_mapping(
        {
            "allocated_bytes.all.current": cur("allocated_bytes"),
            "reserved_bytes.all.current": cur("reserved_bytes"),
            "allocated_bytes.all.peak": cur("allocated_bytes", "peak"),
            "reserved_bytes.all.peak": cur("reserved_bytes", "peak"),
            "inactive_split_bytes.all.current": cur("inactive_split_bytes"),
            "active_bytes.all.current": cur("active_bytes"),
            "num_alloc_retries": nested.get("num_alloc_retries", 0),
            "num_ooms": nested.get("num_ooms", 0),
        }
    )


def record_scale(scale: Any) -> None:
    """Queue the GradScaler scale after ``update()`` for the step that just ended."""
    if not is_owner() or S.finished or S.step == 0:
        return
    step = S.step - 1
    if step in S.waiting:
        S.waiting[step].add("scaler_scale")
    was_quiet, S.quiet = S.quiet, True
    try:
        _apply(S.lazy.push(step, "scaler_scale", scale))
    finally:
        S.quiet = was_quiet


def _apply(results: list) -> None:
    for step, field, value in results:
        if field == "scaler_skipped":
            value = bool(value > 0)
        _set(step, field, value)


def _set(step: Any, field: str, value: Any) -> None:
    fields = S.pending.get(step)
    if fields is None:
        return
    fields[field] = value
    S.waiting.get(step, set()).discard(field)
    if step in S.written:
        S.changed.add(step)


# ---- the profiler window ---------------------------------------------------------------------


def _window_boundary(step: int) -> None:
    """Start the window before step ``first``; stop it after step ``last`` (indices from 0)."""
    if S.window is None:
        return
    first, last = S.window
    from gpudoctor.collectors import profiler_window

    if step + 1 == first and S.profiler is None:
        S.profiler = profiler_window.Window.start(rank=S.rank, first_step=first)
    elif step == last and S.profiler is not None:
        _let_cupti_tear_down()
        S.profiler.stop(last_step=step)


def _let_cupti_tear_down() -> None:
    """Ask Kineto to detach CUPTI when the window stops, so later steps run unobserved.

    Kineto keeps CUPTI subscribed after a profiler stops unless ``TEARDOWN_CUPTI=1``
    (pytorch/pytorch#144455: training stayed slower after profiling had finished); every step
    after our window would pay for it. The window is the last profiler use of the run, so the
    teardown is safe; it is left alone where someone already chose (the variable is set) or
    torch has asked for no re-init (``DISABLE_CUPTI_LAZY_REINIT``, set for CUDA graphs), and on
    CUDA before 12.6, where teardown and CUDA graphs crash together. The variable stays set:
    Kineto reads it while it stops, possibly on its own thread.
    """
    if "TEARDOWN_CUPTI" in os.environ or "DISABLE_CUPTI_LAZY_REINIT" in os.environ:
        return
    import torch

    if not torch.cuda.is_initialized():
        return  # a CPU-only window never started CUPTI
    try:
        major, minor = (int(x) for x in (torch.version.cuda or "0.0").split(".")[:2])
    except ValueError:
        return
    if (major, minor) >= (12, 6):
        os.environ["TEARDOWN_CUPTI"] = "1"


