"""Named host operations of each step: ``torch.save``/``torch.load`` and garbage collection.

What the host does besides training in a step decides a periodic stall's fix (a checkpoint is
moved to a thread, a collector is frozen), so each step's record carries the time of these
operations, measured around every call, with the script's own frame that called them:

* ``torch.save`` / ``torch.load``: wrapped; per call one ``perf_counter`` pair, the bytes when
  the target is a path (one ``stat``) or a seekable file (``tell``), and one walk up the
  stack to the first frame of the script's own code. Calls inside another named operation or
  inside ``DataLoader.__next__`` (a dataset that loads ``.pt`` files) are not counted: their
  time already belongs to it.
* garbage collection: a ``gc.callbacks`` entry times every collection (start to stop).

Steps that run long are sampled besides (:mod:`.host_sampler`). Everything here runs only in
the training process (a forked DataLoader worker inherits the callback and skips it).
"""

from __future__ import annotations

import gc
import os
import sys
import time
from typing import Any

from gpudoctor.collectors.instrument.state import HostCounters, S, is_owner
from gpudoctor.records.step import OP_GC, OP_LOAD, OP_SAVE

_perf = time.perf_counter

# Not the script's own code: the interpreter's library, installed packages, gpudoctor's probes.
_LIBRARY = ("site-packages/", "dist-packages/", "/lib/python3", "<frozen ", "gpudoctor/collectors/")
_LIB_MODULES = ("torch", "gpudoctor.collectors")  # a source checkout of torch is a library too
_USER: dict[Any, bool] = {}  # code object -> is the script's own code (cached: the sampler asks often)
MAX_DEPTH = 200  # frames walked at most, from the innermost one
MAX_CODES = 50_000  # code objects remembered at most


def is_user_frame(frame: Any) -> bool:
    """Whether ``frame`` runs the script's own code (cached per code object)."""
    code = frame.f_code
    known = _USER.get(code)
    if known is None:
        path = code.co_filename.replace("\\", "/")
        module = str(frame.f_globals.get("__name__", ""))
        known = not any(mark in path for mark in _LIBRARY) and not any(
            module == m or module.startswith(m + ".") for m in _LIB_MODULES)
        if len(_USER) > MAX_CODES:
            _USER.clear()  # a script that makes code objects as it goes (exec, lambdas in a loop)
        _USER[code] = known
    return known


def site_of(frame: Any) -> str:
    """``function (file.py:88)`` of ``frame``."""
    return f"{frame.f_code.co_name} ({os.path.basename(frame.f_code.co_filename)}:{frame.f_lineno})"


def caller_site(frame: Any) -> str:
    """The innermost frame of the script's own code at or above ``frame``, or empty."""
    for _ in range(MAX_DEPTH):
        if frame is None:
            return ""
        if is_user_frame(frame):
            return site_of(frame)
        frame = frame.f_back
    return ""


def _add(host: HostCounters, op: str, seconds: float, nbytes: int = 0, gen2: int = 0, site: str = "") -> None:
    entry = host.ops.get(op)
    if entry is None:
        host.ops[op] = [seconds, 1, nbytes, gen2, site, seconds]
        return
    entry[0] += seconds
    entry[1] += 1
    entry[2] += nbytes
    entry[3] += gen2
    if seconds > entry[5]:
        entry[4], entry[5] = site, seconds


def _size(target: Any) -> int | None:
    """The size of a file given by path, or the position of a seekable file object; else ``None``."""
    try:
        if isinstance(target, (str, bytes, os.PathLike)):
            return os.stat(target).st_size
        tell = getattr(target, "tell", None)
        return int(tell()) if tell is not None else None
    except (OSError, ValueError, TypeError):
        return None


def _serializer(orig: Any, op: str, target_at: int) -> Any:
    """``orig`` (``torch.save``: the file is argument 1; ``torch.load``: argument 0) timed."""

    def wrapper(*args: Any, **kwargs: Any) -> Any:
        host = S.host
        if host.op or S.quiet or not is_owner():
            return orig(*args, **kwargs)
        target = kwargs.get("f", args[target_at] if len(args) > target_at else None)
        by_path = isinstance(target, (str, bytes, os.PathLike))
        start = None if by_path else _size(target)
        host.op = op
        t0 = _perf()
        try:
            return orig(*args, **kwargs)
        finally:
            seconds = _perf() - t0
            host.op = ""
            end = _size(target)  # a path: the file's size; a file object: where it now stands
            nbytes = (end or 0) if by_path else (end - start if end is not None and start is not None else 0)
            _add(host, op, seconds, max(0, nbytes), site=caller_site(sys._getframe(1)))

    wrapper.__name__ = getattr(orig, "__name__", "wrapper")
    wrapper.__doc__ = getattr(orig, "__doc__", None)
    wrapper.__wrapped__ = orig
    return wrapper


def _gc_callback(phase: str, info: dict[str, Any]) -> None:
    host = S.host
    if phase == "start":
        host.gc_t0 = _perf()
        host.gc_gen = int(info.get("generation", 0))
        return
    if host.gc_t0 == 0.0:
        return
    seconds, host.gc_t0 = _perf() - host.gc_t0, 0.0
    if is_owner():
        _add(host, OP_GC, seconds, gen2=1 if host.gc_gen == 2 else 0)


def install(torch: Any) -> None:
    """Wrap ``torch.save``/``torch.load`` and register the collection timer (once)."""
    if getattr(torch.save, "_gpudoctor", False):
        return
    for name, op, at in (("save", OP_SAVE, 1), ("load", OP_LOAD, 0)):
        wrapped = _serializer(getattr(torch, name), op, at)
        wrapped._gpudoctor = True
        setattr(torch, name, wrapped)
    if _gc_callback not in gc.callbacks:
        gc.callbacks.append(_gc_callback)


def end_step(fields: dict[str, Any], step_s: float) -> None:
    """Hand the step's named operations and sampled frames to its record (``fields``, plain
    data), and start counting the next step. Empty lists are left out (the record's default)."""
    host = S.host
    host.recent.append(step_s)
    ops, host.ops = host.ops, {}
    frames, host.frames = host.frames, {}
    if ops:
        fields["host_ops"] = [
            {"op": op, "ms": round(e[0] * 1000.0, 3), "calls": e[1], "bytes": e[2], "gen2": e[3], "site": e[4]}
            for op, e in ops.items()]
    if frames:
        rows = sorted(frames.items(), key=lambda kv: -kv[1][1])[:8]
        fields["host_frames"] = [
            {"function": k[0], "file": k[1], "line": k[2], "op": k[3], "samples": v[0],
             "ms": round(v[1] * 1000.0, 3), "lib": max(v[2], key=v[2].get) if v[2] else "",
             "callers": list(v[3])}
            for k, v in rows]


__all__ = ["caller_site", "end_step", "install", "is_user_frame", "site_of"]
