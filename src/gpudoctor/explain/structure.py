"""The structure around one failure in a log: its exception, the message as a template (numbers and
quoted names abstracted), the traceback frames (function, file) above it, its rank, the warnings
printed above it, and the nearby lines.

A line regex sees one line; the same OOM message means "wrap evaluation in no_grad()" under an
``evaluate()`` frame and "optimizer state" under ``optimizer.step()``. :mod:`gpudoctor.explain.context`
reads these parts to name the situation. Pure functions over the log's lines.
"""

from __future__ import annotations

import dataclasses
import re

from gpudoctor.explain.logparse import strip_rank

_FRAME = re.compile(r'^\s*File "(?P<file>[^"]+)", line (?P<line>\d+)(?:, in (?P<func>[\w<>.]+))?')
_EXCEPTION = re.compile(
    r"^\s*(?P<type>(?:[A-Za-z_]\w*\.)*[A-Za-z_]\w*(?:Error|Exception|Failure))(?::\s*(?P<msg>.*))?$"
)
_WARNING = re.compile(r"\b(?P<type>[A-Z]\w*Warning): (?P<msg>.*)")
_QUOTED = re.compile(r"'[^'\n]{1,80}'|\"[^\"\n]{1,80}\"|`[^`\n]{1,80}`")
_NUMBER = re.compile(r"\b0x[0-9a-f]+\b|\d+(?:\.\d+)?")

# how far above a failure its traceback and its warnings may start; how far around it "nearby" reaches
TRACEBACK_LOOKBACK = 120
NEARBY_BEFORE = 60
NEARBY_AFTER = 40  # a worker's own stderr line comes before the main process's re-raise


@dataclasses.dataclass(frozen=True, slots=True)
class Frame:
    """One traceback frame: ``File "file", line N, in function`` and the source line under it."""

    file: str
    line: int
    function: str
    code: str = ""


@dataclasses.dataclass(frozen=True, slots=True)
class FailureStructure:
    """The parts of the log around one matched line."""

    exception_type: str
    template: str
    frames: tuple[Frame, ...]
    rank: int | None
    warnings: tuple[str, ...]
    nearby: str  # the nearby lines, lower-cased and joined by newlines

    @property
    def functions(self) -> tuple[str, ...]:
        """Frame function names, outermost first, each lower-cased."""
        return tuple(f.function.lower() for f in self.frames)

    @property
    def code(self) -> str:
        """The source lines the traceback echoes, lower-cased."""
        return "\n".join(f.code.lower() for f in self.frames if f.code)


def template(message: str) -> str:
    """``message`` with quoted names -> ``<name>`` and numbers -> ``#``: the shape of an error,
    the same across models, sizes and ranks."""
    return _NUMBER.sub("#", _QUOTED.sub("<name>", " ".join(message.split())))


def _frames_above(lines: list[str], index: int, rank: int | None) -> tuple[Frame, ...]:
    """The traceback frames above ``index`` in the same rank, outermost first. A nested traceback
    (a DataLoader worker's "Original Traceback", "During handling ... another exception") is read
    through: every frame above belongs to the situation."""
    frames: list[Frame] = []
    code = ""
    for j in range(index - 1, max(-1, index - TRACEBACK_LOOKBACK), -1):
        line_rank, body = strip_rank(lines[j])
        if rank is not None and line_rank is not None and line_rank != rank:
            continue
        match = _FRAME.match(body)
        if match:
            frames.append(Frame(file=match["file"], line=int(match["line"]),
                                function=match["func"] or "", code=code))
            code = ""
            continue
        stripped = body.strip()
        if stripped and body[:1].isspace() and not stripped.startswith(("^", "~")):
            code = stripped
        elif stripped and not frames and not body[:1].isspace() and j < index - 3:
            break  # plain output between the error and anything above: no traceback of its own
        else:
            code = ""
    return tuple(reversed(frames))


def failure_structure(lines: list[str], index: int) -> FailureStructure:
    """The structure of the failure reported on line ``index`` (0-based) of ``lines``."""
    rank, body = strip_rank(lines[index]) if 0 <= index < len(lines) else (None, "")
    exc = _EXCEPTION.match(body)
    exception_type = exc["type"] if exc else ""
    message = (exc["msg"] or "") if exc else body
    start = max(0, index - NEARBY_BEFORE)
    warnings = tuple(
        template(w["type"] + ": " + w["msg"])
        for line in lines[start:index]
        if (w := _WARNING.search(line))
    )
    nearby = "\n".join(lines[start: index + NEARBY_AFTER + 1]).lower()
    return FailureStructure(
        exception_type=exception_type,
        template=template(message),
        frames=_frames_above(lines, index, rank),
        rank=rank,
        warnings=warnings,
        nearby=nearby,
    )
