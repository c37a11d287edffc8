"""A low-rate sampler of the training thread's stack, only in steps that already run long.

A periodic stall whose host work is no named operation (evaluation, an image dump, a metric
written to disk) is named by where the training thread was: a daemon thread sleeps until the
current step has run ``slow_factor`` x the recent median step (at least ``min_slow_s``), then
reads the training thread's frame (``sys._current_frames``) every ``interval_s`` until the step
ends. Per sample it keeps the innermost frame of the script's own code, the named operation
running then (``S.host.op``, or ``gc``), the innermost library frame and two outer frames of the
script's own code; :func:`~gpudoctor.collectors.instrument.host_work.end_step` hands them to the
step's record. A normal step ends before the deadline: the thread wakes at most once per step
(or per ``min_slow_s``), reads two numbers and sleeps again.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from dataclasses import dataclass
from typing import Any

from gpudoctor.collectors.instrument.host_work import MAX_DEPTH, is_user_frame, site_of
from gpudoctor.collectors.instrument.state import S
from gpudoctor.records.step import OP_GC

_perf = time.perf_counter


@dataclass(frozen=True, slots=True, kw_only=True)
class SamplerConfig:
    """When and how often the sampler reads the training thread's stack."""

    slow_factor: float = 3.0  # a step is sampled once it has run this many recent median steps
    min_slow_s: float = 0.05  # ... and at least this long (a 1 ms step is not sampled at 3 ms)
    interval_s: float = 0.01  # between samples of a long step
    max_sleep_s: float = 0.5  # the longest sleep before the deadline is looked at again


CONFIG = SamplerConfig()


def start(config: SamplerConfig = CONFIG) -> None:
    """Start the sampler in this process for the calling (training) thread, once per process
    (a forked training rank starts its own: threads do not survive a fork)."""
    host = S.host
    if host.sampler_pid == os.getpid():
        return
    host.sampler_pid = os.getpid()
    host.thread = threading.get_ident()
    thread = threading.Thread(target=_loop, args=(config, host.thread), name="gpudoctor-host-sampler", daemon=True)
    thread.start()


def _deadline_s(config: SamplerConfig) -> float | None:
    recent = sorted(S.host.recent)
    if not recent:
        return None  # the first step: start-up, not a stall
    return max(config.slow_factor * recent[len(recent) // 2], config.min_slow_s)


def _loop(config: SamplerConfig, thread: int) -> None:
    try:
        while not S.finished:
            S.host.wakes += 1
            step, started = S.step, S.t_last
            limit = _deadline_s(config)
            wait = config.max_sleep_s if limit is None else started + limit - _perf()
            if wait > 0:
                time.sleep(min(wait, config.max_sleep_s))
                continue
            if not _sample_step(config, thread, step):
                return  # the training thread is gone
    except Exception:  # noqa: BLE001 - the interpreter shutting down: sampling just ends
        return


def _sample_step(config: SamplerConfig, thread: int, step: int) -> bool:
    """Sample the training thread until step ``step`` ends; ``False`` when the thread is gone."""
    last = _perf() - config.interval_s
    while S.step == step and not S.finished:
        frame = sys._current_frames().get(thread)
        if frame is None:
            return False
        now = _perf()
        weight, last = min(now - last, 2 * config.interval_s), now
        host = S.host
        op = OP_GC if host.gc_t0 else host.op
        frames = host.frames
        if S.step == step:  # a boundary in between hands the sample to the next step: dropped
            _note(frames, frame, op, weight)
        del frame
        time.sleep(config.interval_s)
    return True


def _note(frames: dict, frame: Any, op: str, seconds: float) -> None:
    lib = ""
    user: list[Any] = []
    depth = 0
    while frame is not None and len(user) < 3 and depth < MAX_DEPTH:
        if is_user_frame(frame):
            user.append(frame)
        elif not user and not lib:
            lib = f"{frame.f_globals.get('__name__', '?')}.{frame.f_code.co_name}"
        frame = frame.f_back
        depth += 1
    if not user:
        return  # only library frames: start-up, an import, the interpreter's own threads
    inner = user[0]
    key = (inner.f_code.co_name, inner.f_code.co_filename, inner.f_lineno, op)
    entry = frames.get(key)
    if entry is None:
        entry = frames[key] = [0, 0.0, {}, tuple(site_of(f) for f in user[1:])]
    entry[0] += 1
    entry[1] += seconds
    if lib:
        entry[2][lib] = entry[2].get(lib, 0) + 1


__all__ = ["CONFIG", "SamplerConfig", "start"]
