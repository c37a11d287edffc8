"""When TorchDynamo/Inductor compiles, and for how long: published to the parent as it happens.

``gpudoctor run`` must not read a long compilation (``mode="max-autotune"``, a loaded machine)
as a stall. TorchDynamo calls its compile start/end callbacks
(``torch._dynamo.callback.callback_handler``, torch 2.4 on) around every compilation: a new frame,
the backward compiled lazily at the first ``backward()``, and on newer releases CUDA-graph
recording. Ours append one line per outermost start and end to ``compile-pid{PID}.jsonl`` in
the run directory (one ``os.write`` on an ``O_APPEND`` descriptor, like the step file), with
``time.monotonic()`` — the clock the parent's supervisor reads
(:mod:`gpudoctor.collectors.compile_watch`). Each step's record gets the seconds compiled in it
(``compile_ms``).

Cost: nothing for a script that never compiles. The callbacks are registered once TorchDynamo
is imported (:func:`gpudoctor.collectors.instrument.hook.after_import`; gpudoctor never imports
it, torch 2.14 does at a module's first call) and run only when something compiles: two small
writes per compilation, which itself takes milliseconds to minutes. A torch without these
callbacks leaves ``compile_ms`` unset; the per-step ``compiles`` counter still says which steps
compiled.
"""

from __future__ import annotations

import json
import os
import time
from typing import Any

from gpudoctor.collectors.instrument.state import S, is_owner

MODULE = "torch._dynamo.callback"
FILE_PREFIX = "compile-pid"  # compile-pid{PID}.jsonl


class _Clock:
    """This process's compile bookkeeping (one instance, :data:`C`)."""

    def __init__(self) -> None:
        self.armed = False  # our callbacks are registered
        self.depth = 0  # nested starts (older releases run the callbacks per nested compile)
        self.since = 0.0  # monotonic start of the compile in progress
        self.mark = 0.0  # what of the compile in progress is already counted in a step
        self.step_s = 0.0  # seconds compiled in the current step so far
        self.total_s = 0.0
        self.count = 0  # outermost compilations finished
        self.fd: int | None = None
        self.fd_pid = 0


C = _Clock()
_FINDER: list[Any] = []
_REGISTERED: list[tuple[Any, Any, Any]] = []  # (handler, start, end) for uninstall


def install() -> None:
    """Register the callbacks once TorchDynamo is imported (at once when it already is)."""
    from gpudoctor.collectors.instrument import hook

    if C.armed or _FINDER:
        return
    _FINDER.append(hook.after_import(MODULE, _register))
    os.register_at_fork(after_in_child=_forget)


def uninstall() -> None:
    """Take the callbacks and the import finder out again (tests, in-process use)."""
    from gpudoctor.collectors.instrument import hook

    for finder in _FINDER:
        hook.cancel(finder)
    _FINDER.clear()
    for handler, start, end in _REGISTERED:
        try:
            handler.remove_start_callback(start)
            handler.remove_end_callback(end)
        except (AttributeError, ValueError):
            pass
    _REGISTERED.clear()
    _close()
    C.__init__()


def _register() -> None:
    import sys

    module = sys.modules.get(MODULE)
    handler = getattr(module, "callback_handler", None)
    start = getattr(handler, "register_start_callback", None)
    end = getattr(handler, "register_end_callback", None)
    if start is None or end is None or C.armed:
        return  # a torch without compile callbacks: the per-step counter is all there is
    try:
        start(_on_start)
        end(_on_end)
    except Exception:  # noqa: BLE001 - never break the user's script
        return
    _REGISTERED.append((handler, _on_start, _on_end))
    C.armed = True


def _on_start(*args: Any) -> None:
    if not is_owner():
        return
    C.depth += 1
    if C.depth == 1:
        now = time.monotonic()
        C.since = C.mark = now
        trigger = getattr(getattr(args[0], "callback_trigger", None), "name", "") if args else ""
        _publish({"event": "start", "t": now, "trigger": trigger})


def _on_end(*args: Any) -> None:
    if not is_owner() or C.depth == 0:
        return
    C.depth -= 1
    if C.depth == 0:
        now = time.monotonic()
        C.step_s += now - C.mark
        C.total_s += now - C.since
        C.count += 1
        _publish({"event": "end", "t": now, "total_s": round(C.total_s, 3)})


def take_step_ms() -> float | None:
    """Milliseconds compiled since the last call (the step that ends now); ``None`` when the
    callbacks are not registered (no TorchDynamo, or a torch without them)."""
    if not C.armed:
        return None
    seconds = C.step_s
    if C.depth:  # a boundary inside a compilation: the part so far belongs to this step
        now = time.monotonic()
        seconds += now - C.mark
        C.mark = now
    C.step_s = 0.0
    return round(seconds * 1000.0, 3)


def _publish(event: dict[str, Any]) -> None:
    if S.run_dir is None:
        return
    event.update(pid=os.getpid(), rank=S.rank, step=S.step)
    data = (json.dumps(event, separators=(",", ":")) + "\n").encode()
    try:
        if C.fd is None or C.fd_pid != os.getpid():
            C.fd = os.open(S.run_dir / f"{FILE_PREFIX}{os.getpid()}.jsonl",
                           os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o644)
            C.fd_pid = os.getpid()
        os.write(C.fd, data)  # a line of ~100 bytes: one write
    except OSError:
        pass  # evidence, never a reason to break the script


def _close() -> None:
    if C.fd is not None and C.fd_pid == os.getpid():
        try:
            os.close(C.fd)
        except OSError:
            pass
    C.fd = None


def _forget() -> None:
    """In a forked child: the parent's descriptor and counts are not this process's."""
    if C.fd is not None:
        try:
            os.close(C.fd)  # the child's copy only
        except OSError:
            pass
    C.fd, C.depth, C.step_s, C.total_s, C.count = None, 0, 0.0, 0.0, 0


__all__ = ["C", "FILE_PREFIX", "install", "take_step_ms", "uninstall"]
