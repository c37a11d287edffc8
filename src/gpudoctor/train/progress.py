"""The rank-0 progress bar (rich, on stderr, only when stderr is a terminal)."""

from __future__ import annotations

import sys


class ProgressBar:
    """A rich progress bar on rank 0 (stderr, only on a terminal); a no-op elsewhere."""

    def __init__(self, enabled: bool, total: int) -> None:
        self._progress = None
        if enabled and sys.stderr.isatty():
            from rich.console import Console
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

            self._progress = Progress(TextColumn("train"), BarColumn(), MofNCompleteColumn(), TimeRemainingColumn(),
                                      TextColumn("{task.fields[info]}"), console=Console(stderr=True))
            self._task = self._progress.add_task("train", total=total or None, info="")
            self._progress.start()

    def update(self, step: int, loss: float | None, rate: float) -> None:
        if self._progress is not None:
            info = f"loss {loss:.4f}  " if loss is not None else ""
            self._progress.update(self._task, completed=step, info=f"{info}{rate:,.0f} samples/s")

    def close(self) -> None:
        if self._progress is not None:
            self._progress.stop()
