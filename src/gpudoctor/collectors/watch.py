"""What the parent does while the child trains: copy its output live (to our stderr, without the
profiler's log noise) and to ``stdout.log``, sample GPUs and host."""

from __future__ import annotations

import dataclasses
import os
import re
import sys
import threading
from collections import deque
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

from gpudoctor.records.base import JsonlWriter
from gpudoctor.records.rundir import GPU_SAMPLES, HOST_SAMPLES, KIND_GPU, KIND_HOST


# Lines the child writes that are not the script's: logging of the profiler underneath
# (Kineto's C++ glog lines, which KINETO_LOG_LEVEL does not silence) that says nothing to act on.
# They are kept in stdout.log and left out of what the user sees live. Each entry: (pattern, why).
NOISE: tuple[tuple[re.Pattern[bytes], str], ...] = (
    (re.compile(rb"^USDT:\S* \S+ [\d:]+ \S+\] profiler_(start|stop)\s*$"),
     "Kineto logs a USDT trace point each time the profiler window starts and stops"),
    (re.compile(rb"^ERROR:\S* \S+ [\d:]+ \S+\] gpuGetDeviceCount failed with code \d+\s*$"),
     "Kineto probes CUDA on every profiler start; on a machine without a usable GPU it fails "
     "(code 35: no driver) and logs it as an error, although CPU profiling works"),
    (re.compile(rb"^STAGE:\S* \S+ [\d:]+ \S+\] Completed Stage: .*$"),
     "Kineto builds of earlier torch releases log each profiler stage (Warm Up, Collection, "
     "Post Processing) on stderr"),
    (re.compile(rb".*UserWarning: Warning: Profiler clears events at the end of each cycle.*"),
     "torch.profiler warns that a schedule cycle drops the previous cycle's events; gpudoctor's "
     "window is one cycle (the probes silence it in-process; this catches any left)"),
)


def is_noise(line: bytes) -> bool:
    """True for a line of :data:`NOISE` (compared without its line ending)."""
    text = line.rstrip(b"\r\n")
    return any(pattern.match(text) for pattern, _ in NOISE)


class Tee:
    """Copy a child pipe to ``stdout.log`` (everything) and to ``echo`` (live, without the
    :data:`NOISE` lines), keeping the last lines in ``tail``.

    ``echo`` receives whole lines (a line ending in ``\\r``, a progress bar's update, counts as
    one); ``None`` shows nothing (``gpudoctor doctor`` and ``tune`` keep the output in the log).
    """

    def __init__(self, pipe: IO[bytes], echo: Callable[[bytes], None] | None, log: IO[bytes],
                 lock: threading.Lock, tail: deque) -> None:
        self.thread = threading.Thread(target=self._run, args=(pipe, echo, log, lock, tail), daemon=True)
        self.thread.start()

    @staticmethod
    def _run(pipe: IO[bytes], echo: Callable[[bytes], None] | None, log: IO[bytes], lock: threading.Lock,
             tail: deque) -> None:
        fd = pipe.fileno()
        partial = b""  # the last, unfinished line (for the tail)
        pending = b""  # what is not echoed yet: an unfinished line
        unlogged = b""  # an unfinished line, logged once it ends: stdout and stderr are two
        # pipes, and a line written in two parts (print's text, then its newline) must not take
        # the other pipe's lines into its middle
        while True:
            try:
                chunk = os.read(fd, 65536)
            except OSError:
                break
            if not chunk:
                break
            # Only the new chunk can hold a line end (the buffers hold none), so each byte is
            # scanned once: a line of megabytes without a newline costs linear time, not quadratic.
            cut = _last_line_end(chunk)
            if cut or len(unlogged) + len(chunk) > LONG_LINE:
                _log(log, lock, unlogged + chunk[:cut] if cut else unlogged + chunk)
                unlogged = chunk[cut:] if cut else b""
            else:
                unlogged += chunk
            if echo is not None:
                pending = _echo_lines(pending, chunk, echo)
            lines = chunk.split(b"\n")
            if len(lines) > 1:
                tail.append((partial + lines[0])[-LONG_LINE:])
                tail.extend(lines[1:-1])
                partial = lines[-1]
            else:
                partial += chunk
            partial = partial[-LONG_LINE:]
        if unlogged:
            _log(log, lock, unlogged)
        if partial:
            tail.append(partial)
        if echo is not None and pending:
            _echo_lines(pending, b"\n", echo)
        pipe.close()


def _log(log: IO[bytes], lock: threading.Lock, data: bytes) -> None:
    with lock:
        try:
            log.write(data)
            log.flush()
        except ValueError:  # closed: a straggling grandchild wrote after the end
            pass


_LINE_END = re.compile(rb"[^\r\n]*(?:\r\n|\n|\r)")

# A line longer than this is passed on in pieces rather than held until its end: the child may
# print megabytes without a newline, and the parent must neither stall on it nor keep it whole.
LONG_LINE = 1 << 20


def _last_line_end(data: bytes) -> int:
    """The offset just past ``data``'s last ``\\n`` or ``\\r``; 0 when it has none."""
    return max(data.rfind(b"\n"), data.rfind(b"\r")) + 1


def _echo_lines(pending: bytes, chunk: bytes, echo: Callable[[bytes], None]) -> bytes:
    """Echo the finished lines of ``pending + chunk`` that are not noise; return the unfinished
    rest. ``pending`` holds no line end, so only ``chunk`` is searched for the last one."""
    cut = _last_line_end(chunk)
    if not cut:
        rest = pending + chunk
        if len(rest) <= LONG_LINE:
            return rest
        _echo(echo, [rest])  # too long to be profiler noise: show it as it comes
        return b""
    data = pending + chunk[:cut]
    _echo(echo, [m.group() for m in _LINE_END.finditer(data) if not is_noise(m.group())])
    return chunk[cut:]


def _echo(echo: Callable[[bytes], None], shown: list[bytes]) -> None:
    if shown:
        try:
            echo(b"".join(shown))
        except (OSError, ValueError):
            pass  # our terminal went away: keep logging


@dataclasses.dataclass(frozen=True, kw_only=True)
class RunProgress:
    """Where a running child is, for a progress display.

    Attributes:
        stage: ``starting``, ``waiting`` (for the first optimizer step), ``training``,
            ``profiling`` (a step of the profiler window is next), ``stopping`` or ``ended``.
        steps: optimizer steps finished (the furthest rank).
        total: the steps the run stops after; ``None`` runs to the script's end.
        window: the profiler window's (first, last) step, or ``None``.
        compiling_s: while some rank compiles (``torch.compile``), the seconds compiled since
            the last optimizer step; ``None`` when none compiles now.
    """

    stage: str
    steps: int = 0
    total: int | None = None
    window: tuple[int, int] | None = None
    compiling_s: float | None = None


def progress_stage(steps: int, window: tuple[int, int] | None, stopping: bool) -> str:
    """The stage of a running child that finished ``steps`` optimizer steps."""
    if stopping:
        return "stopping"
    if steps == 0:
        return "waiting"
    if window is not None and window[0] <= steps <= window[1]:
        return "profiling"
    return "training"


class ProgressReporter:
    """Turn the supervisor's scans (steps done, stopping, seconds compiling) into
    :class:`RunProgress` reports, one per change of stage, step count or whole second compiled."""

    def __init__(self, report: Callable[[RunProgress], None], *, total: int | None,
                 window: tuple[int, int] | None) -> None:
        self.report, self.total, self.window = report, total, window
        self.last: tuple[str, int, int | None] | None = None

    def __call__(self, steps: int, stopping: bool, compiling_s: float | None = None) -> None:
        seconds = None if compiling_s is None else int(compiling_s)
        now = (progress_stage(steps, self.window, stopping), steps, seconds)
        if now != self.last:
            self.last = now
            self.report(RunProgress(stage=now[0], steps=steps, total=self.total, window=self.window,
                                    compiling_s=None if stopping else compiling_s))


def echoes(echo_child: bool, stdout_to_stderr: bool, echo: Callable[[bytes], None] | None) -> tuple[Any, Any]:
    """Where the child's stdout and stderr lines are shown live (``None``: nowhere)."""
    if not echo_child:
        return None, None
    if echo is not None:
        return echo, echo

    def to(stream: Any) -> Callable[[bytes], None]:
        def write(data: bytes) -> None:
            stream.buffer.write(data)
            stream.buffer.flush()
        return write

    return (to(sys.stderr) if stdout_to_stderr else to(sys.stdout)), to(sys.stderr)


def start_samplers(run_dir: Path, root_pid: int, notes: list[str]) -> list[Any]:
    """Start the NVML and host samplers (each optional); return the started ones."""
    started: list[Any] = []
    try:
        from gpudoctor.collectors.nvml import GpuSampler
    except ImportError as exc:
        notes.append(f"GPU samples unavailable: {exc}")
        GpuSampler = None  # noqa: N806
    try:
        from gpudoctor.collectors.host import HostSampler
    except ImportError as exc:
        notes.append(f"host samples unavailable: {exc}")
        HostSampler = None  # noqa: N806
    for cls, name, kind, kwargs in (
        (GpuSampler, GPU_SAMPLES, KIND_GPU, {"interval": 0.2}),
        (HostSampler, HOST_SAMPLES, KIND_HOST, {"interval": 0.5, "root_pid": root_pid}),
    ):
        if cls is None:
            continue
        writer = JsonlWriter(run_dir / name, kind=kind)
        try:
            sampler = cls(on_sample=writer.write, **kwargs)
            sampler.__enter__()
        except Exception as exc:  # noqa: BLE001 - sampling is evidence, not a requirement
            notes.append(f"{name}: sampler failed to start ({exc})")
            writer.close()
            continue
        if not sampler.available:
            notes.append(f"{name}: {sampler.unavailable_reason}")
        started.append((sampler, writer))
    return started


def stop_samplers(started: list[Any]) -> None:
    for sampler, writer in started:
        try:
            sampler.__exit__(None, None, None)
        finally:
            writer.close()
