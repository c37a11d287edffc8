"""Complete lines appended to growing files since the last read (the supervisor's view of what the
probed processes write: steps, compilations). A half-written last line waits for its end."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path


class JsonlTail:
    """The files of ``folder`` matching ``pattern``, read incrementally."""

    def __init__(self, folder: Path, pattern: str) -> None:
        self.folder = folder
        self.pattern = pattern
        self._offsets: dict[Path, int] = {}
        self._partial: dict[Path, bytes] = {}

    def new_lines(self) -> Iterator[bytes]:
        """Every complete line written since the last call, file by file."""
        for path in self.folder.glob(self.pattern):
            try:
                with path.open("rb") as fh:
                    fh.seek(self._offsets.get(path, 0))
                    chunk = fh.read()
            except OSError:
                continue
            if not chunk:
                continue
            self._offsets[path] = self._offsets.get(path, 0) + len(chunk)
            lines = (self._partial.pop(path, b"") + chunk).split(b"\n")
            if lines[-1]:
                self._partial[path] = lines[-1]
            yield from lines[:-1]
