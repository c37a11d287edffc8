"""Progress of long work, on stderr; stdout stays for results.

On a terminal: one live line (a spinner, the stage, the detail such as "step 12 of 60"), with
messages and the training script's output printed above it; the line disappears when the work
ends. When stderr is not a terminal (a log file, CI, a pipe): one plain ``gpudoctor: ...`` line
per stage, and the detail at most every :data:`PLAIN_EVERY_S` seconds, so a log shows what is
happening without a line per step.

A script's progress bar (a line ending in a carriage return, as tqdm writes) is shown in the
live line on a terminal instead of a new line per update.
"""

from __future__ import annotations

import time
from typing import Any

PLAIN_EVERY_S = 10.0  # a detail line at most this often when stderr is not a terminal
PREFIX = "gpudoctor: "


def run_text(progress: Any) -> tuple[str, str]:
    """(stage, detail) of a :class:`gpudoctor.collectors.watch.RunProgress`; while it compiles
    the detail says ``compiling (N s)``."""
    steps, total, window = progress.steps, progress.total, progress.window
    of = f"step {steps} of {total}" if total is not None else f"step {steps}"
    compiling = getattr(progress, "compiling_s", None)
    if compiling is not None and progress.stage in ("waiting", "training", "profiling"):
        of = ("" if progress.stage == "waiting" else of + " · ") + f"compiling ({compiling:.0f} s)"
    elif progress.stage == "waiting":
        of = ""
    if progress.stage == "starting":
        return "starting the script", ""
    if progress.stage == "waiting":
        return "waiting for the first optimizer step", of
    if progress.stage == "profiling" and window is not None:
        return f"profiling steps {window[0]}-{window[1]}", of
    if progress.stage == "stopping":
        return "stopping the script", of
    if progress.stage == "ended":
        return f"the script ended after {steps} optimizer step{'s' if steps != 1 else ''}", ""
    return "training", of


class Progress:
    """A progress display on ``console`` (stderr); use as a context manager.

    ``stage(text)`` starts a stage, ``detail(text)`` updates within it, ``say(text)`` prints a
    message that stays, ``echo(data)`` shows a child's output lines, ``run(progress)`` follows a
    running script (the ``on_progress`` of :func:`gpudoctor.collectors.launch.run_instrumented`).
    """

    def __init__(self, console: Any = None, *, label: str = "") -> None:
        if console is None:
            from gpudoctor.cli.output import stderr_console

            console = stderr_console()
        self.console = console
        self.label = label  # before every stage, e.g. "[2/5] " or "baseline run 1: "
        self.live = console.is_terminal
        self._status: Any = None
        self._stage = ""
        self._detail = ""
        self._bar = ""  # the child's progress bar (a line ending in \r), terminal only
        self._plain_at = 0.0  # when a plain detail line was last printed

    def __enter__(self) -> Progress:
        if self.live:
            self._status = self.console.status(self._text())
            self._status.__enter__()
        return self

    def __exit__(self, *exc: Any) -> None:
        if self._status is not None:
            self._status.__exit__(*exc)
            self._status = None

    def _text(self) -> str:
        parts = [p for p in (self.label + self._stage if self._stage else "", self._detail, self._bar) if p]
        return " · ".join(parts) or "starting"

    def _refresh(self) -> None:
        if self._status is not None:
            from rich.text import Text

            self._status.update(Text(self._text(), overflow="ellipsis", no_wrap=True))

    def _plain(self, text: str) -> None:
        self.console.print(PREFIX + text, highlight=False, markup=False)

    def stage(self, text: str, detail: str = "") -> None:
        """A new stage: the live line's text, or one plain line (with its first detail)."""
        if text == self._stage:
            self.detail(detail)
            return
        self._stage, self._detail, self._bar = text, detail, ""
        if self.live:
            self._refresh()
        else:
            self._plain(self.label + text + (f": {detail}" if detail else ""))
            self._plain_at = time.monotonic()

    def detail(self, text: str) -> None:
        """Progress within the stage: live; plain at most every :data:`PLAIN_EVERY_S` seconds."""
        if text == self._detail:
            return
        self._detail = text
        if not text:
            return
        if self.live:
            self._refresh()
        elif time.monotonic() - self._plain_at >= PLAIN_EVERY_S:
            self._plain(f"{self.label}{self._stage}: {text}")
            self._plain_at = time.monotonic()

    def headline(self, text: str) -> None:
        """A numbered stage that stays on screen (``gpudoctor: [2/5] ...``), in both modes; on a
        terminal the live line under it shows the stage's progress."""
        self.say(PREFIX + text)
        self._stage, self._detail, self._bar = text, "", ""
        self._plain_at = time.monotonic()
        self._refresh()

    def say(self, message: str) -> None:
        """A message that stays (printed above the live line)."""
        self.console.print(message, highlight=False, markup=False)

    def run(self, progress: Any) -> None:
        """Follow a running script (``on_progress``). Plain lines leave out "starting" and
        "ended": "waiting for the first step" and the next stage follow at once."""
        stage, detail = run_text(progress)
        if not self.live and progress.stage in ("starting", "ended"):
            self._stage, self._detail = stage, detail
            return
        self.stage(stage, detail)

    def echo(self, data: bytes) -> None:
        """Show a child's output lines (whole lines, as :class:`gpudoctor.collectors.watch.Tee`
        gives them)."""
        if not self.live:
            stream = getattr(self.console.file, "buffer", None)
            if stream is None:
                self.console.file.write(data.decode("utf-8", "replace"))
            else:
                self.console.file.flush()
                stream.write(data)
            self.console.file.flush()
            return
        from rich.text import Text

        text = data.decode("utf-8", "replace")
        lines: list[str] = []
        for line in text.splitlines(keepends=True):
            if line.endswith("\r"):  # a progress bar's update: shown in the live line
                self._bar = line.strip()[-60:]
                continue
            self._bar = ""
            lines.append(line.rstrip("\r\n"))
        if lines:  # one print for a burst of lines; the script's colours kept (ANSI codes parsed)
            self.console.print(Text.from_ansi("\n".join(lines)), highlight=False, markup=False, soft_wrap=True)
        self._refresh()
