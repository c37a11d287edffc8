"""The probes of ``gpudoctor run``, installed in the *current* process and taken out again.

``gpudoctor run`` puts its probes into a child through ``sitecustomize``; a Jupyter cell, a
script that calls ``gpudoctor.watch`` or every rank torchrun starts cannot be re-launched that
way. :class:`InProcessProbes` installs the same wrappers (:mod:`~gpudoctor.collectors.instrument.patches`),
the same optimizer-step hooks and the same profiler window here, writes the same run directory
(manifest, ``config-``/``steps-``/``window-rank{N}``, ``gpu.jsonl``, ``host.jsonl``, and
``leak-sites-rank{N}.json`` when run's online leak check,
:mod:`~gpudoctor.collectors.instrument.leak_probe`, sees the allocated bytes climb), and after
``steps`` optimizer steps writes everything and restores every patched attribute, without
stopping the loop: the script goes on at full speed, unobserved.

Taking the patches out: before installing, the namespaces the wrappers patch are copied
(:data:`PATCHED`); at the end every attribute that differs is set back (or deleted where the
wrapper added it). The optimizer hooks stay registered until :meth:`InProcessProbes.close`
(torch iterates its hook dict while a hook runs, so a hook cannot remove itself), but do
nothing once observation ended. The ``--steps`` stop of ``gpudoctor run`` (``os._exit``) is
never armed here.
"""

from __future__ import annotations

import dataclasses
import os
import socket
import sys
import time
from pathlib import Path
from typing import Any

import gpudoctor
from gpudoctor.collectors import outdir
from gpudoctor.collectors.launch import default_window
from gpudoctor.collectors.instrument import ENV_RUN_DIR
from gpudoctor.collectors.watch import start_samplers, stop_samplers
from gpudoctor.errors import GpuDoctorUserError
from gpudoctor.records.base import write_json
from gpudoctor.records.rundir import KIND_MANIFEST, MANIFEST, read_steps, steps_file
from gpudoctor.records.run import RunManifest

# Where the wrappers of instrument.patches/grad_norm live: "module" or "module:Class".
PATCHED = (
    "torch",
    "torch:Tensor",
    "torch.cuda",
    "torch.autograd",
    "torch.utils.data.dataloader:_BaseDataLoaderIter",
    "torch.utils.data:DataLoader",
    "torch.utils.data:DistributedSampler",
    "torch.amp.autocast_mode:autocast",
    "torch.amp:GradScaler",
    "torch.nn.parallel:DistributedDataParallel",
    "torch.nn:DataParallel",
    "torch.nn.utils.clip_grad",
    "torch.nn.utils",
)

_ACTIVE: list[InProcessProbes] = []  # at most one: the probes' state is per process


def _namespace(spec: str) -> Any:
    import importlib

    module_name, _, attr = spec.partition(":")
    module = importlib.import_module(module_name)
    return getattr(module, attr) if attr else module


def wrappers_in_place(specs: tuple[str, ...] = PATCHED) -> list[str]:
    """``Owner.attr`` of every attribute of :data:`PATCHED` that is one of gpudoctor's own
    functions: the probes' wrappers while they are in, nothing once they are out."""
    found = []
    for ns in (_namespace(s) for s in specs):
        for key, value in vars(ns).items():
            if str(getattr(value, "__module__", "") or "").startswith("gpudoctor."):
                found.append(f"{getattr(ns, '__name__', ns)}.{key}")
    return sorted(found)


class Snapshot:
    """The attributes of :data:`PATCHED` before the probes went in.

    :meth:`keep_changes`, called right after installing, notes what the probes set;
    :meth:`restore` sets back only those attributes, and only where the probes' object is still
    there: what the script adds meanwhile (``torch._dynamo`` appearing on ``torch`` at its first
    ``torch.compile``, a patch of its own) is left alone.
    """

    def __init__(self, specs: tuple[str, ...] = PATCHED) -> None:
        self._saved = [(ns, dict(vars(ns))) for ns in (_namespace(s) for s in specs)]
        self._ours: list[tuple[Any, str, Any]] = []  # (namespace, attribute, the probes' object)

    def keep_changes(self) -> None:
        self._ours = []
        for ns, before in self._saved:
            for key, value in vars(ns).items():
                if key not in before or value is not before[key]:
                    self._ours.append((ns, key, value))

    def restore(self) -> None:
        saved = {id(ns): before for ns, before in self._saved}
        for ns, key, ours in reversed(self._ours):
            if vars(ns).get(key, _ABSENT) is not ours:
                continue  # replaced since by someone else: theirs stays
            before = saved[id(ns)]
            if key in before:
                setattr(ns, key, before[key])
            else:
                delattr(ns, key)
        self._ours = []


_ABSENT = object()


@dataclasses.dataclass(frozen=True, kw_only=True)
class WatchSpec:
    """What :class:`InProcessProbes` observes.

    Attributes:
        run_dir: where the records go (created; must be new or empty, like ``run --out``).
        steps: optimizer steps to observe; the loop goes on unobserved after them.
        profile: take the profiler window (placed like ``gpudoctor run``'s).
        keep_trace: also write the window's Chrome trace (``trace-rank{N}.json``).
        trace_dir: write the window's trace in TensorBoard's profiler layout there.
        nvtx: NVTX ranges around each step, optimizer step and data wait (CUDA only).
        sample: run the NVML and host samplers (on the node's first rank).
        name: the run's name in the manifest's command.
    """

    run_dir: Path
    steps: int = 60
    profile: bool = True
    keep_trace: bool = False
    trace_dir: Path | None = None
    nvtx: bool = False
    sample: bool = True
    name: str = "gpudoctor.watch"

    def __post_init__(self) -> None:
        if self.steps < 1:
            raise GpuDoctorUserError(f"watch(steps={self.steps}): observe at least 1 optimizer step")


def default_watch_dir(name: str, base: Path = Path("gpudoctor-runs")) -> Path:
    """``gpudoctor-runs/<stamp>-<name>``; under torchrun ``gpudoctor-runs/watch-<run id>``, so
    every rank finds the same directory without talking to the others."""
    run_id = os.environ.get("TORCHELASTIC_RUN_ID")
    if run_id and run_id != "none":
        return base / f"watch-{run_id}"
    stamp = time.strftime("%Y%m%d-%H%M%S")
    path, n = base / f"{stamp}-{name}", 2
    while path.exists():
        path, n = base / f"{stamp}-{name}-{n}", n + 1
    return path


def _env_rank() -> int:
    try:
        return int(os.environ.get("RANK", "0"))
    except ValueError:
        return 0


class InProcessProbes:
    """Install the probes in this process (:meth:`start`), end observation (:meth:`end`)."""

    def __init__(self, spec: WatchSpec) -> None:
        self.spec = spec
        self.run_dir = spec.run_dir
        self.notes: list[str] = []
        self.status = "running"
        self.error = ""
        self.active = False
        self.ended = False
        self.delegated = False  # inside `gpudoctor run`: its probes observe, the watch adds nothing
        self._snapshot: Snapshot | None = None
        self._handles: list[Any] = []
        self._samplers: list[Any] = []
        self._manifest: RunManifest | None = None
        self._first = _env_rank() == 0

    # ---- start ---------------------------------------------------------------------------------

    def start(self) -> InProcessProbes:
        from gpudoctor.collectors.instrument.state import S

        if S.installed and S.run_dir is not None and os.environ.get(ENV_RUN_DIR) and not _ACTIVE:
            # Inside `gpudoctor run`: its probes already measure this process; add nothing.
            self.delegated, self.run_dir, self.ended, self.status = True, S.run_dir, True, "delegated"
            print(f"gpudoctor: gpudoctor.watch does nothing under gpudoctor run, which already "
                  f"observes this process (run directory {S.run_dir})", file=sys.stderr)
            return self
        if S.installed or _ACTIVE:
            raise GpuDoctorUserError(
                "gpudoctor is already observing this process (gpudoctor run, or another "
                "gpudoctor.watch that has not ended); end it first or drop one of them"
            )
        import torch  # noqa: F401 - the probes wrap torch: it is imported now, not at gpudoctor import

        if self._first:
            outdir.claim(self.run_dir)
        self.run_dir.mkdir(parents=True, exist_ok=True)
        window = default_window(self.spec.steps) if self.spec.profile else None
        if not self.spec.profile:
            self.notes.append("profiler window off")
        if self._first:
            self._manifest = RunManifest(
                command=(self.spec.name, *sys.argv[:1]),
                started_at=time.time(),
                steps_requested=self.spec.steps,
                hostname=socket.gethostname(),
                gpudoctor_version=gpudoctor.__version__,
                python=sys.version.split()[0],
                profile_window=tuple(window or ()),
            )
            write_json(self.run_dir / MANIFEST, self._manifest, kind=KIND_MANIFEST)
        try:
            self._install(window)
        except Exception:
            if self._snapshot is not None:
                self._snapshot.restore()
            S.installed = False
            for handle in self._handles:
                handle.remove()
            raise
        _ACTIVE.append(self)
        self.active = True
        if self.spec.sample and os.environ.get("LOCAL_RANK", "0") == "0":
            self._samplers = start_samplers(self.run_dir, os.getpid(), self.notes)
        return self

    def _install(self, window: tuple[int, int] | None) -> None:
        import torch.optim.optimizer as optim_mod

        from gpudoctor.collectors.instrument import leak_probe, patches
        from gpudoctor.collectors.instrument.state import S

        S.adopt()  # a fresh state (a notebook may watch several times in one kernel)
        S.owner_pid = os.getpid()
        S.run_dir = self.run_dir
        S.rank = _env_rank()
        S.steps_limit = None  # gpudoctor run's os._exit stop: never in the user's own process
        S.window = window
        S.keep_trace = self.spec.keep_trace
        if self.spec.trace_dir is not None:
            S.seen.trace_dir = str(self.spec.trace_dir)
        S.t_origin = S.t_last = time.perf_counter()
        self._snapshot = Snapshot()
        try:  # what went in before a failure is noted too, so that end() takes it out
            patches.install_all()
            if self.spec.nvtx:
                from gpudoctor.collectors.instrument import nvtx

                note = nvtx.install(self._handles, enabled=lambda: self.active)
                if note:
                    self.notes.append(note)
        finally:
            self._snapshot.keep_changes()
        S.installed = True
        # run's online leak check, with the watch's end as the limit: a leak showing at the
        # boundaries records allocation history for a few steps and names its sites
        leak_probe.arm(window, self.spec.steps)
        self._handles.append(optim_mod.register_optimizer_step_post_hook(self._post_hook))
        if window is not None:
            handle = optim_mod.register_optimizer_step_pre_hook(self._prewarm_hook)
            S.seen.prewarm_handle = handle  # the step boundary removes it after step 0
            self._handles.append(handle)

    # ---- the optimizer-step hooks -------------------------------------------------------------

    def _prewarm_hook(self, optimizer: Any, args: Any, kwargs: Any) -> None:
        if self.active:
            from gpudoctor.collectors.instrument import probes

            probes._prewarm_pre_hook(optimizer, args, kwargs)

    def _post_hook(self, optimizer: Any, args: Any, kwargs: Any) -> None:
        if not self.active:
            return
        from gpudoctor.collectors.instrument import probes
        from gpudoctor.collectors.instrument.state import S

        probes._optimizer_post_hook(optimizer, args, kwargs)
        if S.step >= self.spec.steps:
            self.end("stopped")

    # ---- the end -------------------------------------------------------------------------------

    def end(self, status: str, error: str = "") -> None:
        """Write everything gathered, take the patches out, stop the samplers (idempotent)."""
        if self.ended:  # also: delegated to gpudoctor run
            return
        from gpudoctor.collectors.instrument import ending, leak_probe
        from gpudoctor.collectors.instrument.state import S

        self.ended, self.active = True, False
        try:
            leak_probe.disarm()  # a leak's history still recording (the block ended first) stops
            ending.finish(status)
        finally:
            if self._snapshot is not None:
                self._snapshot.restore()
            S.installed = False
            S.quiet = False
            stop_samplers(self._samplers)
            self._samplers = []
            if self in _ACTIVE:
                _ACTIVE.remove(self)
        steps = self.steps_recorded()
        if status == "completed" and steps == 0:
            status = "no_steps"
        self.status, self.error = status, error
        if self._manifest is not None:
            ranks = sorted(int(p.stem.removeprefix("steps-rank")) for p in self.run_dir.glob("steps-rank*.jsonl"))
            counts = {r: len(read_steps(self.run_dir / steps_file(r))) for r in ranks}
            window = self._manifest.profile_window
            if window and status == "completed" and 0 < steps <= window[0]:
                self.notes.append(
                    f"the watched code made {steps} optimizer steps, before the profiler window "
                    f"(steps {window[0]}-{window[1]}): no kernel-level evidence; watch(steps={steps}) "
                    "profiles its last steps")
            final = dataclasses.replace(
                self._manifest, ended_at=time.time(), exit_code=None if error else 0, status=status,
                error=error, ranks=tuple(ranks), world_size=len(ranks) or None, notes=tuple(self.notes),
                steps_recorded=tuple(counts[r] for r in ranks),
            )
            write_json(self.run_dir / MANIFEST, final, kind=KIND_MANIFEST)

    def close(self) -> None:
        """Remove the (already inert) optimizer hooks: call outside any optimizer step."""
        for handle in self._handles:
            handle.remove()
        self._handles = []

    def steps_recorded(self) -> int:
        path = self.run_dir / steps_file(_settled_rank())
        return len(read_steps(path)) if path.is_file() else 0


def _settled_rank() -> int:
    from gpudoctor.collectors.instrument.state import S

    return S.rank


__all__ = ["PATCHED", "InProcessProbes", "Snapshot", "WatchSpec", "default_watch_dir", "wrappers_in_place"]
