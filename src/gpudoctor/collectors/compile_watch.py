"""The parent's view of the child's compilations, read from ``compile-pid{PID}.jsonl`` as they grow.

Each probed process appends a ``start`` and an ``end`` line around every compilation
(:mod:`gpudoctor.collectors.instrument.compile_events`), stamped with ``time.monotonic()``, the
system-wide clock the supervisor reads too. Here they become intervals, so the supervisor can
ask how many of the seconds since the last optimizer step were spent compiling (on any rank:
one compiling rank holds the others in their next collective) and whether a compilation is
running now.
"""

from __future__ import annotations

import json
from pathlib import Path

from gpudoctor.collectors.instrument.compile_events import FILE_PREFIX
from gpudoctor.collectors.jsonl_tail import JsonlTail


class CompileWatch:
    """Compile intervals of every probed process, read incrementally."""

    def __init__(self, run_dir: Path) -> None:
        self.run_dir = run_dir
        self._tail = JsonlTail(run_dir, f"{FILE_PREFIX}*.jsonl")
        self.open: dict[int, float] = {}  # pid -> start of its compilation in progress
        self.spans: list[tuple[float, float]] = []  # finished compilations (start, end)
        self.seen = False  # any compilation at all

    def poll(self, now: float) -> None:
        """Read the lines appended since the last call."""
        for line in self._tail.new_lines():
            self._take(line, now)

    def _take(self, line: bytes, now: float) -> None:
        try:
            data = json.loads(line)
            pid, event, t = int(data["pid"]), data["event"], min(float(data["t"]), now)
        except (ValueError, KeyError, TypeError):
            return
        self.seen = True
        if event == "start":
            self.open[pid] = t
        elif event == "end" and pid in self.open:
            self.spans.append((self.open.pop(pid), t))

    def compiling(self) -> bool:
        """Some process is compiling now (as of the last :meth:`poll`)."""
        return bool(self.open)

    def seconds(self, since: float, now: float) -> float:
        """Seconds of ``[since, now]`` during which at least one process compiled."""
        spans = sorted([(max(a, since), min(b, now)) for a, b in self.spans if b > since]
                       + [(max(a, since), now) for a in self.open.values()])
        total, reach = 0.0, since
        for a, b in spans:
            a = max(a, reach)
            if b > a:
                total += b - a
                reach = b
        return total

    def forget_before(self, t: float) -> None:
        """Drop finished intervals that ended before ``t`` (the last step): no longer needed."""
        self.spans = [(a, b) for a, b in self.spans if b > t]


__all__ = ["CompileWatch"]
