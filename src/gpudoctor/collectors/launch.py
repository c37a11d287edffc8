"""Start a training command as a child process with the probes injected, and watch it.

``python x.py ...``, ``python -m pkg.mod ...`` and ``torchrun ... x.py`` all work unchanged: the
probes ride in on ``PYTHONPATH`` (see :mod:`gpudoctor.collectors.instrument`), so they reach
every rank torchrun starts. The child's stdout and stderr both stream live to our *stderr*
(our stdout holds gpudoctor's results only), without the profiler's log noise
(:data:`gpudoctor.collectors.watch.NOISE`), and are teed whole to ``stdout.log``. The parent
samples the GPUs (NVML) and the host while the child runs, and reports the run's stage and step
to an ``on_progress`` callback (:class:`RunProgress`).

Ending: the child's exit code passes through; a child killed by signal N gives 128+N. A stall
(no optimizer step for a while), Ctrl-C and the first-step timeout first write every probed
process's Python stacks, then stop the child's process group (:mod:`gpudoctor.collectors.supervise`).
Whatever ended the run, the manifest and the records gathered so far are written.
"""

from __future__ import annotations

import dataclasses
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections import deque
from collections.abc import Callable
from pathlib import Path

import gpudoctor
from gpudoctor.collectors import instrument, outdir, rank_files, stacks
from gpudoctor.collectors.instrument import spawn
from gpudoctor.collectors.command import default_run_dir, resolve_command, run_name  # noqa: F401 - re-exported
from gpudoctor.collectors.knobs import Knob, child_env
from gpudoctor.collectors.supervise import COMPILE_TIMEOUT_S, Supervisor, signal_group
from gpudoctor.collectors.watch import ProgressReporter, RunProgress, Tee, echoes, start_samplers, stop_samplers
from gpudoctor.core.parent_death import die_with_parent
from gpudoctor.errors import GpuDoctorUserError
from gpudoctor.records.base import write_json
from gpudoctor.records.rundir import KIND_MANIFEST, MANIFEST, STDOUT
from gpudoctor.records.run import RunManifest

DEFAULT_STEPS = 60
WINDOW_STEPS = 5
MIN_WARMUP = 5  # steps before the window: CUDA/cuDNN start-up, allocator growth, first compiles
FULL_WINDOW = (10, 14)  # --full: the end is unknown, so the window comes early
EXIT_INTERRUPTED = 130
STALL_TIMEOUT_S = 30.0
FIRST_STEP_TIMEOUT_S = 120.0


@dataclasses.dataclass(frozen=True, kw_only=True)
class RunSpec:
    """What to run and how to measure it.

    Attributes:
        command: the training command, as a list of arguments (never a shell string).
        run_dir: where the records go (created; must not hold another run).
        steps: stop after this many optimizer steps; ``None`` runs the script to its end.
        profile: take the short profiler window.
        knobs: ``--try`` knobs to inject.
        first_step_timeout_s: stop the child, with every rank's stacks, when no optimizer step
            happened by then.
        stall_timeout_s: stop the child, with every rank's stacks, when no optimizer step
            happened for ``max(stall_timeout_s, 20 x the median step)``. Neither this limit nor
            ``first_step_timeout_s`` counts the seconds spent compiling (``torch.compile``).
        compile_timeout_s: stop the child, with every rank's stacks, when it compiled this long
            without an optimizer step (a compilation that hangs).
        keep_trace: also write the window's Chrome trace (``trace-rank{N}.json``).
        child_stdout_to_stderr: show the child's stdout on our stderr (the default: our stdout is
            for results); ``False`` shows it on our stdout (a library caller's choice).
        echo_child: show the child's output live; ``False`` keeps it in ``stdout.log`` only.
        grace_s: how long the child gets to exit after SIGINT before SIGTERM (then SIGKILL).
        sample_gpu: run the NVML and host samplers.
        profile_window: profile these optimizer steps (first, last; from 0) instead of the
            default placement (see :attr:`window`).
        memory_stages: memory mode (``gpudoctor memory run``): record the allocator at each
            stage of the first N optimizer steps and dump a snapshot on OOM; 0 (default) is off.
        trace_dir: also write the window's trace there (:mod:`~gpudoctor.collectors.trace_export`).
        nvtx: NVTX ranges around each step, optimizer step and data wait (Nsight Systems).
        memory_modules: with memory mode, also the peak of each module's forward in one step.
    """

    command: tuple[str, ...]
    run_dir: Path
    steps: int | None = DEFAULT_STEPS
    profile: bool = True
    knobs: tuple[Knob, ...] = ()
    first_step_timeout_s: float = FIRST_STEP_TIMEOUT_S
    stall_timeout_s: float = STALL_TIMEOUT_S
    compile_timeout_s: float = COMPILE_TIMEOUT_S
    keep_trace: bool = False
    child_stdout_to_stderr: bool = True
    echo_child: bool = True
    grace_s: float = 10.0
    sample_gpu: bool = True
    memory_stages: int = 0
    memory_modules: bool = False
    profile_window: tuple[int, int] | None = None
    trace_dir: Path | None = None
    nvtx: bool = False

    def __post_init__(self) -> None:
        if not self.command:
            raise ValueError("no command given; write it after --, e.g. gpudoctor run -- python train.py")
        if self.steps is not None and self.steps < 1:
            raise ValueError(f"--steps {self.steps}: must be at least 1 (or use --full)")
        if not self.first_step_timeout_s > 0:
            raise ValueError(f"--first-step-timeout {self.first_step_timeout_s}: must be > 0 seconds")
        if not self.stall_timeout_s > 0:
            raise ValueError(f"--stall-timeout {self.stall_timeout_s}: must be > 0 seconds")
        if not self.compile_timeout_s > 0:
            raise ValueError(f"--compile-timeout {self.compile_timeout_s}: must be > 0 seconds")
        if self.memory_stages < 0:
            raise ValueError(f"--stages {self.memory_stages}: must be at least 1 (0 turns memory mode off)")
        if self.trace_dir is not None and not self.profile:
            raise ValueError("--trace-dir needs the profiler window; drop --no-profile")
        if not self.grace_s >= 0:
            raise ValueError("grace_s must be >= 0")
        if self.profile_window is not None:
            first, last = self.profile_window
            if not 1 <= first <= last:
                raise ValueError(
                    f"--window {first}:{last}: give FIRST:LAST with 1 <= FIRST <= LAST "
                    "(step 0 holds the start-up), e.g. --window 20:24"
                )
            if self.steps is not None and last >= self.steps:
                raise ValueError(
                    f"--window {first}:{last} ends after the run stops (--steps {self.steps}, "
                    f"steps 0-{self.steps - 1}); raise --steps or move the window"
                )

    @property
    def window(self) -> tuple[int, int] | None:
        """The profiler window's (first, last) step.

        By default the last :data:`WINDOW_STEPS` steps before ``steps``: the window's closing
        sync (``prof.stop()`` waits for the device) and its host-side teardown then touch no
        step after it, so every other step runs with the probes alone. With ``steps=None``
        (``--full``) the end is unknown and the window takes steps 10-14; the steps right after
        it then start with the host's lead over the GPU used up (see docs/run.md).
        """
        if not self.profile:
            return None
        return self.profile_window if self.profile_window is not None else default_window(self.steps)


def default_window(steps: int | None) -> tuple[int, int] | None:
    """The default (first, last) window step for ``steps`` steps (``None``: to the end), for
    ``run`` and ``gpudoctor.watch``; :attr:`RunSpec.window` explains the placement."""
    if steps is None:
        return FULL_WINDOW
    last = steps - 1
    first = last - WINDOW_STEPS + 1
    if first >= MIN_WARMUP:
        return first, last
    # a short run: fit the window after a quarter of it
    first = max(1, steps // 4)
    last = min(first + WINDOW_STEPS - 1, steps - 1)
    return (first, last) if last >= first else None


@dataclasses.dataclass(frozen=True, kw_only=True)
class RunOutcome:
    """How the run ended: its directory, its manifest and the exit code gpudoctor should use."""

    run_dir: Path
    manifest: RunManifest
    exit_code: int
    message: str = ""


def child_environment(spec: RunSpec, environ: dict[str, str] | None = None) -> dict[str, str]:
    """The child's environment: ours plus the probe switches and the sitecustomize path."""
    env = dict(os.environ if environ is None else environ)
    site = str(instrument.SITE_DIR)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (site, env.get("PYTHONPATH", "")) if p)
    env[instrument.ENV_PKG_ROOT] = str(Path(gpudoctor.__file__).resolve().parent.parent)
    env[instrument.ENV_RUN_DIR] = str(spec.run_dir.resolve())
    env[instrument.ENV_STEPS] = "" if spec.steps is None else str(spec.steps)
    window = spec.window
    env[instrument.ENV_PROFILE] = f"{window[0]}:{window[1]}" if window else ""
    env[instrument.ENV_KEEP_TRACE] = "1" if spec.keep_trace else ""
    env["PYTHONUNBUFFERED"] = "1"  # live output through the pipe
    env[instrument.ENV_MEMORY_STAGES] = str(spec.memory_stages) if spec.memory_stages else ""
    env[instrument.ENV_TRACE_DIR] = str(spec.trace_dir.resolve()) if spec.trace_dir is not None else ""
    env[instrument.ENV_NVTX] = "1" if spec.nvtx else ""
    env[instrument.ENV_MEMORY_MODULES] = "1" if spec.memory_stages and spec.memory_modules else ""
    env.pop(instrument.ENV_KNOBS, None)
    if spec.knobs:
        env.update(child_env(spec.knobs, env))
    return env


def run_instrumented(spec: RunSpec, *, say: Callable[[str], None] | None = None,
                     echo: Callable[[bytes], None] | None = None,
                     on_progress: Callable[[RunProgress], None] | None = None) -> RunOutcome:
    """Run ``spec.command`` under the probes; write the run directory; return how it ended.

    Raises :class:`GpuDoctorUserError` when the command cannot be started or ``spec.run_dir``
    holds anything (nothing is run or touched then; ``--force`` is :func:`outdir.claim`'s).
    ``say`` receives messages for the user (default: our stderr). ``echo`` receives the child's
    output lines, noise left out (default: our stderr, or stdout for its stdout when
    ``spec.child_stdout_to_stderr`` is off); unused when ``spec.echo_child`` is off.
    ``on_progress`` is called with the run's :class:`RunProgress` at the start, at each change of
    stage or step count (read every half second) and at the end.
    """
    say = say or (lambda message: print(message, file=sys.stderr, flush=True))
    report = on_progress or (lambda progress: None)
    command = resolve_command(tuple(spec.command))
    run_dir = spec.run_dir
    outdir.claim(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    notes: list[str] = []
    if not spec.profile:
        notes.append("profiler window off (memory mode)" if spec.memory_stages else "profiler window off")
    if os.environ.get("CUDA_LAUNCH_BLOCKING", "0") not in ("", "0"):
        notes.append(
            "CUDA_LAUNCH_BLOCKING is set: every kernel launch waits for the GPU, so step times "
            "are not representative; unset it (it is for locating errors, not for speed)"
        )
    manifest = RunManifest(
        command=command,
        started_at=time.time(),
        steps_requested=spec.steps,
        hostname=socket.gethostname(),
        gpudoctor_version=gpudoctor.__version__,
        python=sys.version.split()[0],
        knobs=tuple(str(k) for k in spec.knobs),
        profile_window=tuple(spec.window or ()),
    )
    write_json(run_dir / MANIFEST, manifest, kind=KIND_MANIFEST)

    log = (run_dir / STDOUT).open("wb")
    window = spec.window
    report(RunProgress(stage="starting", total=spec.steps, window=window))
    try:
        proc = subprocess.Popen(
            list(command),
            env=child_environment(spec),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            process_group=0,  # its own group: Ctrl-C reaches gpudoctor, which stops the whole job
            preexec_fn=die_with_parent(),  # and kill -9 of gpudoctor does not leave it training
        )
    except OSError as exc:
        log.close()
        final = dataclasses.replace(manifest, ended_at=time.time(), status="crashed", error=str(exc), exit_code=None)
        write_json(run_dir / MANIFEST, final, kind=KIND_MANIFEST)
        raise GpuDoctorUserError(f"could not start {command[0]}: {exc}") from None
    lock = threading.Lock()
    out_tail: deque = deque(maxlen=40)
    err_tail: deque = deque(maxlen=40)
    echo_out, echo_err = echoes(spec.echo_child, spec.child_stdout_to_stderr, echo)
    tees = [Tee(proc.stdout, echo_out, log, lock, out_tail), Tee(proc.stderr, echo_err, log, lock, err_tail)]
    on_scan = ProgressReporter(report, total=spec.steps, window=window)
    watch = Supervisor(proc, run_dir, first_step_timeout_s=spec.first_step_timeout_s,
                       stall_timeout_s=spec.stall_timeout_s, compile_timeout_s=spec.compile_timeout_s,
                       grace_s=spec.grace_s, say=say, on_scan=on_scan)
    on_scan(0, False, None)
    previous = {}
    in_main = threading.current_thread() is threading.main_thread()
    if in_main:
        for sig in (signal.SIGINT, signal.SIGTERM):
            previous[sig] = signal.signal(sig, watch.on_signal)
    samplers = start_samplers(run_dir, proc.pid, notes) if spec.sample_gpu else []
    try:
        watch.watch()
    finally:
        for tee in tees:
            tee.thread.join(timeout=3.0)
        if any(tee.thread.is_alive() for tee in tees):
            # Grandchildren (orphaned loader workers, ...) still hold the pipes: end them.
            signal_group(proc.pid, signal.SIGKILL)
            for tee in tees:
                tee.thread.join(timeout=2.0)
        with lock:
            log.close()
        stop_samplers(samplers)
        if in_main:
            for sig, handler in previous.items():
                signal.signal(sig, handler)
    rc = proc.returncode
    counts = rank_files.steps_per_rank(run_dir)
    stacks.settle(run_dir, rank_files.pid_ranks(run_dir))
    ranks = rank_files.ranks(run_dir)
    steps_done = max(counts.values(), default=0)
    report(RunProgress(stage="ended", steps=steps_done, total=spec.steps, window=window))
    status, error = _status(spec, rc, watch.stop_reason, steps_done, err_tail or out_tail)
    if window is not None and 0 < steps_done <= window[0] and status == "completed":
        notes.append(
            f"the script ended after {steps_done} optimizer steps, before the profiler window "
            f"(steps {window[0]}-{window[1]}): no kernel-level evidence; run it again with "
            f"--steps {steps_done} to profile its last steps"
        )
    message = ""
    if status in ("timeout", "stalled"):
        error = watch.message  # already said live; the manifest keeps the explanation
        if status == "stalled":
            notes.append(f"stalled at step {min(counts.values(), default=0)}")
    elif status == "interrupted" and watch.idle_s is not None:
        notes.append(f"interrupted at step {steps_done}, {watch.idle_s:.1f} s after the last optimizer step")
    if status in ("timeout", "stalled", "interrupted") and watch.compiling:
        since = "since the last optimizer step" if steps_done else "before the first optimizer step"
        notes.append(f"stopped while compiling: torch.compile had compiled for {watch.compile_s or 0:.0f} s {since}")
    elif status == "no_steps":
        message = (
            "the script exited without a single optimizer step: gpudoctor measures training "
            "steps (optimizer.step()); nothing to diagnose"
        )
        children = spawn.unprobed_children(run_dir)
        if children:
            shown = ", ".join(sorted(set(children)))
            message = (
                f"the probed process took no optimizer step, but started {len(children)} "
                f"process(es) of its own before it ({shown}), which gpudoctor does not probe: "
                "training there (Hogwild-style multiprocessing.Process) is not measured; run the "
                "training function in the main process, or start it with "
                "torch.multiprocessing.spawn or torchrun, whose ranks are probed"
            )
            notes.append(message)
    elif status == "crashed":
        message = f"the script exited with code {rc}; its last error lines are in the manifest and stdout.log"
    final = dataclasses.replace(
        manifest,
        ended_at=time.time(),
        exit_code=rc,
        status=status,
        error=error,
        ranks=tuple(ranks),
        world_size=rank_files.world_size(run_dir, ranks),
        notes=tuple(notes),
        steps_recorded=tuple(counts.get(r, 0) for r in ranks),
        idle_s=round(watch.idle_s, 1) if watch.idle_s is not None else None,
        stall_limit_s=watch.limit_s,
        compile_s=watch.compile_s,
        compiling=watch.compiling,
        compile_limit_s=watch.compile_limit_s,
    )
    write_json(run_dir / MANIFEST, final, kind=KIND_MANIFEST)
    return RunOutcome(run_dir=run_dir, manifest=final, exit_code=_exit_code(status, rc), message=message)


def _status(spec: RunSpec, rc: int, stop_reason: str, steps_done: int, tail: deque) -> tuple[str, str]:
    error = ""
    if stop_reason == "interrupted":
        return "interrupted", error
    if stop_reason in ("timeout", "stalled"):
        return stop_reason, ""
    if rc != 0:
        lines = [line.decode("utf-8", "replace").rstrip() for line in tail]
        return "crashed", "\n".join(line for line in lines if line)[-4000:]
    if steps_done == 0:
        return "no_steps", error
    if spec.steps is not None and steps_done >= spec.steps:
        return "stopped", error
    return "completed", error


def _exit_code(status: str, rc: int) -> int:
    if status == "interrupted":
        return EXIT_INTERRUPTED
    if status in ("timeout", "stalled", "no_steps"):
        return 1
    if rc < 0:
        return 128 + (-rc)  # killed by a signal: the shell's convention
    return rc
