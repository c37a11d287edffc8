"""Watch the running child: its steps, stalls, signals, and stopping it.

The parent reads each rank's ``steps-rank{N}.jsonl`` as it grows (every step is written at its
boundary: :mod:`gpudoctor.collectors.instrument.stepfile`). The run is *stalled* when no rank
finished an optimizer step for ``max(stall_timeout_s, STALL_MEDIANS x the median step)``; before
the first step the limit is ``first_step_timeout_s`` (start-up: imports, data). Compilation is
progress, not a stall: the seconds any rank spends compiling (:mod:`.compile_watch`) do not count
against those limits, but against their own, longer ``compile_timeout_s`` (a compilation that
hangs, or recompiles without end, still stops). A stall, a timeout and Ctrl-C all ask every
probed process for its Python stacks first (:mod:`gpudoctor.collectors.stacks`), then stop the
process group: the signal gpudoctor got (Ctrl-C: SIGINT, else SIGTERM), SIGTERM after
``grace_s``, then SIGKILL.
"""

from __future__ import annotations

import json
import os
import signal
import statistics
import subprocess
import time
from collections import deque
from collections.abc import Callable
from pathlib import Path
from typing import Any

from gpudoctor.collectors import stacks
from gpudoctor.collectors.compile_watch import CompileWatch
from gpudoctor.collectors.jsonl_tail import JsonlTail

STALL_MEDIANS = 20  # a step this many times the median long, with no step since, is a stall
# Compiling without an optimizer step this long is stuck: max-autotune of a large model compiles
# for minutes, and compile time does not count against the stall limits.
COMPILE_TIMEOUT_S = 900.0
POLL_S = 0.1
SCAN_S = 0.5  # how often the step files are read
KILL_WAIT_S = 5.0


class StepProgress:
    """Optimizer steps per rank, read incrementally from the step files."""

    def __init__(self, run_dir: Path) -> None:
        self.run_dir = run_dir
        self._tail = JsonlTail(run_dir, "steps-rank*.jsonl")
        self.done: dict[int, int] = {}  # rank -> steps finished (highest step index + 1)
        self.recent_ms: deque[float] = deque(maxlen=256)  # step times after step 0, all ranks
        self.last_step_at: float | None = None  # monotonic time a new step was last seen

    def poll(self, now: float) -> bool:
        """Read what was appended since the last call; True when a new step showed up."""
        grew = False
        for line in self._tail.new_lines():
            grew |= self._take(line)
        if grew:
            self.last_step_at = now
        return grew

    def _take(self, line: bytes) -> bool:
        try:
            data = json.loads(line)
            rank, step = int(data["rank"]), int(data["step"])
        except (ValueError, KeyError, TypeError):
            return False  # the header, or a line we cannot read
        if step < self.done.get(rank, 0):
            return False  # a later line completing a step already counted
        self.done[rank] = step + 1
        if step > 0 and isinstance(data.get("step_ms"), (int, float)):
            self.recent_ms.append(float(data["step_ms"]))
        return True

    @property
    def steps(self) -> int:
        return max(self.done.values(), default=0)

    def median_s(self) -> float | None:
        return statistics.median(self.recent_ms) / 1000.0 if self.recent_ms else None


class Supervisor:
    """The parent's loop while the child runs (see the module docstring)."""

    def __init__(self, proc: subprocess.Popen, run_dir: Path, *, first_step_timeout_s: float,
                 stall_timeout_s: float, grace_s: float, say: Callable[[str], None],
                 on_scan: Callable[[int, bool, float | None], None] | None = None,
                 compile_timeout_s: float = COMPILE_TIMEOUT_S) -> None:
        self.proc = proc
        self.run_dir = run_dir
        self.first_step_timeout_s = first_step_timeout_s
        self.stall_timeout_s = stall_timeout_s
        self.compile_timeout_s = compile_timeout_s
        self.grace_s = grace_s
        self.say = say
        # (steps done, stopping, seconds compiled since the last step while compiling now, else
        # None) after each read of the step files
        self.on_scan = on_scan
        self.progress = StepProgress(run_dir)
        self.compiles = CompileWatch(run_dir)
        self.stop_reason = ""  # "" | "interrupted" | "timeout" | "stalled"
        self.message = ""
        self.idle_s: float | None = None  # seconds without a step when it was stopped
        self.limit_s: float | None = None  # the stall limit that applied then
        self.compile_s: float | None = None  # of idle_s, seconds compiling (None: no compile seen)
        self.compiling = False  # a compilation was in progress when it was stopped
        self.compile_limit_s: float | None = None  # set when the compile limit stopped it
        self.interrupts = 0
        self.received = signal.SIGINT
        self.started = time.monotonic()

    def on_signal(self, signum: int, frame: Any) -> None:
        self.interrupts += 1
        if not self.stop_reason:
            self.stop_reason, self.received = "interrupted", signum

    def stall_limit_s(self) -> float:
        """How long without a step counts as stalled, now."""
        if not self.progress.steps:
            return self.first_step_timeout_s
        median = self.progress.median_s()
        return max(self.stall_timeout_s, STALL_MEDIANS * median if median is not None else 0.0)

    def _idle_s(self, now: float) -> float:
        return now - self._last(now)

    def _last(self, now: float) -> float:
        return self.progress.last_step_at or self.started

    def compile_s_now(self, now: float) -> float:
        """Seconds compiled since the last optimizer step (any rank)."""
        return self.compiles.seconds(self._last(now), now)

    def _note_compiles(self, now: float) -> None:
        self.compiling = self.compiles.compiling()
        self.compile_s = round(self.compile_s_now(now), 1) if self.compiles.seen else None

    def _check_stall(self, now: float) -> None:
        limit = self.stall_limit_s()
        idle = self._idle_s(now)
        compiled = self.compile_s_now(now)
        if idle - compiled <= limit and compiled <= self.compile_timeout_s:
            return
        self.compiles.poll(now)  # a compilation that began since the last scan counts too
        compiled = self.compile_s_now(now)
        over_compile = compiled > self.compile_timeout_s
        if idle - compiled <= limit and not over_compile:
            return
        self.idle_s, self.limit_s = idle, limit
        self._note_compiles(now)
        steps = self.progress.steps
        at = f"at step {min(self.progress.done.values())}" if steps else "before the first optimizer step"
        # compile time is left out of the stall limits: say how much of the wait it was
        spent = f", {compiled:.0f} s of it compiling, which does not count" if compiled >= 1.0 else ""
        if over_compile:
            self.compile_limit_s = self.compile_timeout_s
            self.stop_reason = "stalled" if steps else "timeout"
            self.message = (
                f"stuck compiling {at}: torch.compile compiled for {compiled:.0f} s without an "
                f"optimizer step (limit {self.compile_timeout_s:g} s); writing every rank's stacks "
                "and stopping it. Raise --compile-timeout if compiling this model takes that long."
            )
        elif not steps:
            self.stop_reason = "timeout"
            self.message = (
                f"no optimizer step in {idle:.0f} s (limit {limit:g} s{spent}): the script never "
                "called optimizer.step() (or is stuck before its first step); stopping it. Raise "
                "--first-step-timeout if its start-up is slow."
            )
        else:
            self.stop_reason = "stalled"
            self.message = (
                f"stalled {at}: no optimizer step for {idle:.0f} s (limit {limit:g} s{spent}); "
                "writing every rank's stacks and stopping it. Raise --stall-timeout if the script "
                "evaluates or checkpoints for that long."
            )
        self.say(f"gpudoctor: {self.message}")

    def watch(self) -> None:
        """Run until the child has exited (stopping it when a stop reason comes up)."""
        proc = self.proc
        deadline: float | None = None
        escalation = 0
        next_scan = 0.0
        while proc.poll() is None:
            time.sleep(POLL_S)
            now = time.monotonic()
            if now >= next_scan:
                if self.progress.poll(now):
                    self.compiles.forget_before(self._last(now))
                self.compiles.poll(now)
                next_scan = now + SCAN_S
                if self.on_scan is not None:
                    compiling = self.compile_s_now(now) if self.compiles.compiling() else None
                    self.on_scan(self.progress.steps, bool(self.stop_reason), compiling)
            if not self.stop_reason:
                self._check_stall(now)
            if self.stop_reason and deadline is None:
                if self.stop_reason == "interrupted":
                    self.progress.poll(now)
                    self.compiles.poll(now)
                    self.idle_s, self.limit_s = self._idle_s(now), self.stall_limit_s()
                    self._note_compiles(now)
                    self.say("gpudoctor: interrupted; writing the stacks, stopping the script and "
                             "writing what was gathered (Ctrl-C again to kill it now)")
                if self.interrupts <= 1:
                    stacks.request(self.run_dir, proc.pid)
                # Pass on the signal gpudoctor got (Ctrl-C -> SIGINT, kill -> SIGTERM).
                first = self.received if self.stop_reason == "interrupted" else signal.SIGTERM
                signal_group(proc.pid, first)
                deadline = time.monotonic() + self.grace_s
            elif deadline is not None and (time.monotonic() > deadline or self.interrupts > 1):
                escalation += 1
                last = escalation > 1 or self.interrupts > 1
                signal_group(proc.pid, signal.SIGKILL if last else signal.SIGTERM)
                deadline = time.monotonic() + KILL_WAIT_S
        proc.wait()
        self.progress.poll(time.monotonic())


def signal_group(pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass
