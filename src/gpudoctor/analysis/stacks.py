"""Read a rank's ``faulthandler`` stack dump: the main thread's frames, the user's code in them,
and whether the rank was waiting in a collective. Pure: text in, plain data out."""

from __future__ import annotations

import re
from dataclasses import dataclass

_MAIN = re.compile(r"main thread (0x[0-9a-f]+)")
_THREAD = re.compile(r"^(?:Current thread|Thread) (0x[0-9a-f]+) \(most recent call first\):", re.M)
_FRAME = re.compile(r'^\s+File "(.*)", line (\d+) in (.+)$')

# Not the user's code: the interpreter's library, installed packages, gpudoctor's probes.
_LIBRARY = ("site-packages/", "dist-packages/", "/lib/python3", "<frozen ", "gpudoctor/collectors/")
# torch.distributed calls that block until every rank joins (c10d's Python API).
COLLECTIVES = frozenset({
    "all_reduce", "all_gather", "all_gather_into_tensor", "all_gather_object", "all_to_all",
    "all_to_all_single", "barrier", "monitored_barrier", "broadcast", "broadcast_object_list",
    "reduce", "reduce_scatter", "reduce_scatter_tensor", "gather", "gather_object", "scatter",
    "scatter_object_list", "send", "recv", "wait", "init_process_group", "new_group",
})


@dataclass(frozen=True)
class Frame:
    path: str
    line: int
    function: str

    @property
    def short(self) -> str:
        """``file.py:12 in fn``, with the file's last two path parts."""
        parts = self.path.replace("\\", "/").split("/")
        return f"{'/'.join(parts[-2:]) if len(parts) > 1 else parts[0]}:{self.line} in {self.function}"

    @property
    def is_user(self) -> bool:
        return not any(mark in self.path.replace("\\", "/") for mark in _LIBRARY)


@dataclass(frozen=True)
class RankStack:
    """A rank's main thread at the dump (innermost frame first)."""

    frames: tuple[Frame, ...]

    @property
    def user_frames(self) -> tuple[Frame, ...]:
        return tuple(f for f in self.frames if f.is_user)

    @property
    def collective(self) -> Frame | None:
        """The innermost ``torch.distributed`` collective the main thread is inside, if any."""
        for f in self.frames:
            if "torch/distributed/" in f.path.replace("\\", "/") and f.function in COLLECTIVES:
                return f
        return None

    @property
    def in_backward(self) -> bool:
        """Inside ``loss.backward()`` (where DDP's gradient all-reduce waits)."""
        return any("torch/autograd/" in f.path.replace("\\", "/") and f.function == "backward" for f in self.frames)


def main_thread(text: str) -> RankStack | None:
    """The main thread's stack from a ``stacks-rank{N}.txt`` (the last dump in the file).

    The file's header names the main thread's id; without it, the last ``Current thread`` block.
    ``None`` when the file holds no dump.
    """
    main = _MAIN.search(text)
    main_id = main.group(1) if main else None
    blocks: list[tuple[str, bool, list[Frame]]] = []
    for line in text.splitlines():
        thread = _THREAD.match(line)
        if thread:
            blocks.append((thread.group(1), line.startswith("Current"), []))
            continue
        frame = _FRAME.match(line)
        if frame and blocks:
            blocks[-1][2].append(Frame(frame.group(1), int(frame.group(2)), frame.group(3).strip()))
    if not blocks:
        return None
    chosen = [b for b in blocks if b[0] == main_id] if main_id else [b for b in blocks if b[1]]
    frames = (chosen or blocks)[-1][2]
    return RankStack(frames=tuple(frames))


__all__ = ["COLLECTIVES", "Frame", "RankStack", "main_thread"]
