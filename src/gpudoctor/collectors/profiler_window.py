"""A short ``torch.profiler`` window, reduced in-process to a :class:`WindowSummary`.

torch.profiler left on for a whole run costs about +64% step time and writes traces of gigabytes
(anchors, pain points 20 and 23). Here it covers a few steps (by default the last five of
``--steps``, steps 10-14 with ``--full``: ``collectors.launch.RunSpec.window``), records CPU and
CUDA activity and the FLOPs of matmuls and convolutions (which records input shapes) — no stacks
or memory — and the events are reduced in memory to the figures the analysis needs. No trace file is kept unless asked (``--keep-trace``).

Every GPU figure comes from the GPU timeline (kernel and copy intervals), never from the host's
wall time: a GPU-bound host runs ahead of the GPU, so the window's host wall time and the GPU
work of its steps need not line up.

``prof.stop()`` waits for the device to drain its activity buffers: a sync, once, at the end of
the window. The reduction (:func:`reduce_events`) is pure and runs when the records are written.
"""

from __future__ import annotations

import json
import os
import statistics
import time
import warnings
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gpudoctor.records.run import MemcpyStat, OpStat, WindowSummary

# the caching allocator's calls into CUDA (cudaFree also waits for the device)
ALLOC_NAMES = frozenset({"cudaMalloc", "cudaFree", "cudaMallocAsync", "cudaFreeAsync"})
SYNC_NAMES = frozenset(
    {
        "cudaDeviceSynchronize",
        "cudaStreamSynchronize",
        "cudaEventSynchronize",
        "cudaMemcpy",
        "cuCtxSynchronize",
        "cuStreamSynchronize",
    }
)
LAUNCH_PREFIXES = ("cudaLaunchKernel", "cuLaunchKernel", "cudaLaunchCooperativeKernel", "cudaGraphLaunch")
TOP_N = 10
# Ops whose FLOPs the profiler computes from their input shapes and that count as model FLOPs
# (its formulas also cover element-wise aten::add/mul, which MFU leaves out). Each op carries its
# own count: aten::linear calls aten::addmm, which holds it, so nothing is counted twice.
FLOP_OPS = frozenset({"aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm", "aten::conv2d"})
CONV_FORWARD = "aten::conv2d"
CONV_BACKWARD = "aten::convolution_backward"
GLOO_PREFIX = "gloo:"  # gloo's collectives as CPU ops: gloo:all_reduce, gloo:broadcast, ...


@dataclass(frozen=True, slots=True)
class Event:
    """One profiler event, reduced to what the summary needs. Times in microseconds."""

    name: str
    on_device: bool
    start_us: float
    dur_us: float
    thread: int = 0
    nbytes: int | None = None
    flops: float = 0.0


@contextmanager
def _quiet_profiler():
    """Silence torch.profiler's "clears events at the end of each cycle" warning: gpudoctor's
    window is one cycle, so it says nothing to the user (it printed into every GPU run)."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*Profiler clears events at the end of each cycle.*")
        yield


def _count_flops() -> bool:
    """Whether the window counts matmul/conv FLOPs (for MFU): ``GPUDOCTOR_WINDOW_FLOPS=0`` skips it.

    Counting needs the ops' input shapes, which makes the profiler's stop slower (measured in
    ``benchmarks/run_overhead.py``'s ``instrumented_noflops`` arm).
    """
    return os.environ.get("GPUDOCTOR_WINDOW_FLOPS", "1").strip() not in ("0", "false", "no")


class Window:
    """A running (or finished) profiler window of one rank."""

    def __init__(self, *, rank: int, first_step: int, profiler: Any, note: str = "") -> None:
        self.rank = rank
        self.first_step = first_step
        self.last_step = first_step
        self.profiler = profiler
        self.note = note
        self.stopped = profiler is None
        self._t0 = time.perf_counter()
        self.wall_ms = 0.0

    @classmethod
    def start(cls, *, rank: int, first_step: int) -> Window:
        """Start profiling now (at the boundary before ``first_step``)."""
        try:
            import torch
            from torch.profiler import ProfilerActivity, profile

            activities = [ProfilerActivity.CPU]
            if torch.cuda.is_available() and torch.cuda.is_initialized():
                activities.append(ProfilerActivity.CUDA)
            prof = profile(activities=activities, record_shapes=False, profile_memory=False,
                           with_stack=False, with_flops=_count_flops())
            with _quiet_profiler():
                prof.start()
        except Exception as exc:  # noqa: BLE001 - e.g. the script runs its own profiler
            return cls(rank=rank, first_step=first_step, profiler=None, note=f"profiler unavailable: {exc}")
        window = cls(rank=rank, first_step=first_step, profiler=prof)
        window._t0 = time.perf_counter()
        return window

    def stop(self, *, last_step: int) -> None:
        """Stop profiling (waits for the device's activity buffers: one sync, at window end)."""
        if self.stopped:
            return
        self.wall_ms = (time.perf_counter() - self._t0) * 1000.0
        self.last_step = last_step
        self.stopped = True
        try:
            self.profiler.stop()
        except Exception as exc:  # noqa: BLE001
            self.note = f"profiler failed to stop: {exc}"
            self.profiler = None

    def summarize(self, *, trace_path: Path | None = None) -> WindowSummary | None:
        """Reduce the window's events; ``trace_path`` also writes the Chrome trace there."""
        if self.profiler is None:
            return WindowSummary(
                rank=self.rank, first_step=self.first_step, last_step=self.last_step,
                wall_ms=self.wall_ms, gpu_busy_ms=None, gpu_busy_frac=None, note=self.note,
            )
        events = _kineto_events(self.profiler)
        if trace_path is not None:
            try:
                self.profiler.export_chrome_trace(str(trace_path))
            except Exception as exc:  # noqa: BLE001
                self.note = f"trace not written: {exc}"
        return reduce_events(
            events, rank=self.rank, first_step=self.first_step, last_step=self.last_step,
            wall_ms=self.wall_ms, note=self.note,
        )


def prewarm() -> str:
    """Start and stop a throw-away CUDA profiler once, so the window later starts cheaply.

    The first profiler start in a process loads and initialises CUPTI (tens to hundreds of ms).
    Called during the first optimizer step — start-up time, like CUDA context creation and
    cuDNN autotuning — so that cost does not land inside the measured steps. Returns a note
    when it could not run (the window then pays the set-up itself).
    """
    try:
        import torch
        from torch.profiler import ProfilerActivity, profile

        if not (torch.cuda.is_available() and torch.cuda.is_initialized()):
            return ""
        prof = profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA], record_shapes=False,
                       profile_memory=False, with_stack=False)
        with _quiet_profiler():
            prof.start()
        prof.stop()  # waits for the device: start-up time (step 0), not a measured step
    except Exception as exc:  # noqa: BLE001
        return f"profiler pre-warm failed: {exc}"
    return ""


def _kineto_events(prof: Any) -> list[Event]:
    """Adapt torch's ``_KinetoEvent`` objects (attribute names vary across releases)."""
    events: list[Event] = []
    cpu_names: set[str] = set()
    results = prof.profiler.kineto_results
    for ev in results.events():
        name = ev.name()
        on_device = "CUDA" in str(ev.device_type())
        activity = str(ev.activity_type()).lower() if hasattr(ev, "activity_type") else ""
        if not on_device:
            cpu_names.add(name)
        if on_device and "annotation" in activity:
            continue  # a record_function range drawn on the GPU timeline: not GPU work
        if activity in ("python_function", "overhead"):
            continue
        if hasattr(ev, "start_ns"):
            start_us, dur_us = ev.start_ns() / 1000.0, ev.duration_ns() / 1000.0
        else:
            start_us, dur_us = float(ev.start_us()), float(ev.duration_us())
        thread = ev.start_thread_id() if hasattr(ev, "start_thread_id") else 0
        nbytes = None
        if on_device and name.startswith("Memcpy"):
            nbytes = _memcpy_bytes(ev)
        flops = 0.0
        if not on_device and name in FLOP_OPS and hasattr(ev, "flops"):
            flops = float(ev.flops() or 0)
        events.append(Event(name=name, on_device=on_device, start_us=start_us, dur_us=dur_us,
                            thread=thread, nbytes=nbytes, flops=flops))
    return drop_device_annotations(events, cpu_names)


def drop_device_annotations(events: list[Event], cpu_names: set[str]) -> list[Event]:
    """Drop the GPU-timeline copies of ``record_function`` ranges.

    Kineto draws each CPU-side annotation (``Optimizer.step#AdamW.step``, the script's own
    ``record_function`` ranges) a second time on the GPU timeline, spanning that range's kernels
    and the idle gaps between them. Counted as a kernel it fills the gaps and makes a
    launch-bound GPU look busy (seen with torch 2.11, whose events did not say it was an
    annotation). Kernels and copies never share a name with a CPU-side event, so a device event
    named like one is such a copy.
    """
    if not cpu_names:
        return events
    return [ev for ev in events if not (ev.on_device and ev.name in cpu_names)]


def _memcpy_bytes(ev: Any) -> int | None:
    try:
        meta = json.loads("{" + ev.metadata_json() + "}") if hasattr(ev, "metadata_json") else {}
        value = meta.get("bytes")
        return int(value) if value is not None else None
    except Exception:  # noqa: BLE001
        return None


def _union(intervals: list[tuple[float, float]]) -> list[tuple[float, float]]:
    merged: list[tuple[float, float]] = []
    for start, end in sorted(intervals):
        if merged and start <= merged[-1][1]:
            if end > merged[-1][1]:
                merged[-1] = (merged[-1][0], end)
        else:
            merged.append((start, end))
    return merged


def _overlap(intervals: list[tuple[float, float]], union: list[tuple[float, float]]) -> float:
    """Total length of ``intervals`` covered by the (sorted, disjoint) ``union``."""
    import bisect

    starts = [s for s, _ in union]
    total = 0.0
    for start, end in intervals:
        i = max(bisect.bisect_right(starts, start) - 1, 0)
        while i < len(union) and union[i][0] < end:
            lo, hi = max(start, union[i][0]), min(end, union[i][1])
            if hi > lo:
                total += hi - lo
            i += 1
    return total


def _p50_p90(values: list[float]) -> tuple[float | None, float | None]:
    """Median and 90th percentile (the standard library's, interpolated); ``None`` when empty."""
    if len(values) < 2:
        return (values[0], values[0]) if values else (None, None)
    return statistics.median(values), statistics.quantiles(values, n=10, method="inclusive")[-1]


def _memcpy_key(name: str) -> tuple[str, bool | None]:
    """``"Memcpy HtoD (Pageable -> Device)"`` -> ``("HtoD", False)``."""
    parts = name.split()
    kind = parts[1] if len(parts) > 1 else "unknown"
    pinned = False if "Pageable" in name else True if "Pinned" in name else None
    return kind, pinned


def _self_times(cpu_ops: list[Event]) -> dict[str, list[float]]:
    """Per op name: [count, self-time us]; self time = duration minus nested ops on its thread."""
    out: dict[str, list[float]] = {}
    by_thread: dict[int, list[Event]] = {}
    for ev in cpu_ops:
        by_thread.setdefault(ev.thread, []).append(ev)
    for events in by_thread.values():
        events.sort(key=lambda e: (e.start_us, -e.dur_us))
        stack: list[list[Any]] = []  # [event, child time]
        for ev in [*events, None]:
            while stack and (ev is None or ev.start_us >= stack[-1][0].start_us + stack[-1][0].dur_us):
                done, child = stack.pop()
                slot = out.setdefault(done.name, [0, 0.0])
                slot[0] += 1
                slot[1] += max(done.dur_us - child, 0.0)
                if stack:
                    stack[-1][1] += done.dur_us
            if ev is not None:
                stack.append([ev, 0.0])
    return out


def window_flops(cpu_ops: list[Event]) -> float | None:
    """Model FLOPs of the window: matmul FLOPs (forward and backward both appear as mm ops) plus
    convolution FLOPs, which the profiler counts on the forward op only: a training step's
    backward adds a data-gradient and a weight-gradient convolution of the same size each, so
    forward convolution FLOPs count three times when ``aten::convolution_backward`` ran.
    ``None`` when the profiler computed no FLOPs (no matmul or convolution, or an old torch).
    """
    conv = sum(ev.flops for ev in cpu_ops if ev.name == CONV_FORWARD)
    other = sum(ev.flops for ev in cpu_ops if ev.name in FLOP_OPS and ev.name != CONV_FORWARD)
    if conv + other <= 0:
        return None
    backward = any(ev.name == CONV_BACKWARD for ev in cpu_ops)
    return other + conv * (3.0 if backward else 1.0)


def _length_ms(intervals: list[tuple[float, float]]) -> float:
    return sum(e - s for s, e in intervals) / 1000.0


def reduce_events(
    events: list[Event], *, rank: int, first_step: int, last_step: int, wall_ms: float, note: str = ""
) -> WindowSummary:
    """Reduce a window's events to a :class:`WindowSummary` (pure; tested without a GPU)."""
    kernels, nccl, device_spans = [], [], []
    kernel_totals: dict[str, list[float]] = {}
    memcpy: dict[tuple[str, bool | None], list[Any]] = {}
    cpu_ops: list[Event] = []
    gloo: list[tuple[float, float]] = []
    sync_calls, sync_us, launches = 0, 0.0, 0
    alloc_calls, alloc_us = 0, 0.0
    device_kinds: list[tuple[tuple[float, float], bool]] = []
    for ev in events:
        span = (ev.start_us, ev.start_us + ev.dur_us)
        if ev.on_device:
            device_spans.append(span)
            device_kinds.append((span, ev.name.startswith("Memcpy")))
            if ev.name.startswith("Memcpy"):
                slot = memcpy.setdefault(_memcpy_key(ev.name), [0, 0, 0.0, True])
                slot[0] += 1
                if ev.nbytes is None:
                    slot[3] = False
                else:
                    slot[1] += ev.nbytes
                slot[2] += ev.dur_us
            elif ev.name.startswith("Memset"):
                continue
            else:
                is_nccl = "nccl" in ev.name.lower()
                (nccl if is_nccl else kernels).append(span)
                slot = kernel_totals.setdefault(ev.name, [0, 0.0, is_nccl])
                slot[0] += 1
                slot[1] += ev.dur_us
            continue
        if ev.name in SYNC_NAMES:
            sync_calls += 1
            sync_us += ev.dur_us
        elif ev.name.startswith(LAUNCH_PREFIXES):
            launches += 1
        elif ev.name in ALLOC_NAMES:
            alloc_calls += 1
            alloc_us += ev.dur_us
        elif not ev.name.startswith(("cuda", "cu", "ProfilerStep", "[")):
            cpu_ops.append(ev)
            if ev.name.startswith(GLOO_PREFIX):
                # waiting for the other ranks happens inside these (on gloo's worker threads); the
                # union, so collectives in flight on two threads at once count once
                gloo.append(span)
    busy = _union(device_spans)
    busy_ms = _length_ms(busy)
    has_device = bool(device_spans)
    span_ms = (busy[-1][1] - busy[0][0]) / 1000.0 if busy else None
    kernel_union = _union(kernels)
    copies = [span for span, is_copy in device_kinds if is_copy]
    copy_ms = _length_ms(_union(copies)) - _overlap(_union(copies), kernel_union) / 1000.0
    durations = sorted(e - s for s, e in kernels + nccl)
    p50, p90 = _p50_p90(durations)
    nccl_us = sum(e - s for s, e in nccl)
    overlap = _overlap(nccl, _union(kernels)) / nccl_us if nccl_us > 0 else None
    top_ops = sorted(_self_times(cpu_ops).items(), key=lambda kv: -kv[1][1])[:TOP_N]
    top_kernels = sorted(kernel_totals.items(), key=lambda kv: -kv[1][1])[:TOP_N]
    if not has_device and not note:
        note = "no CUDA activity in the window (a CPU run, or the GPU was not used)"
    return WindowSummary(
        rank=rank,
        first_step=first_step,
        last_step=last_step,
        wall_ms=wall_ms,
        gpu_busy_ms=busy_ms if has_device else None,
        gpu_busy_frac=busy_ms / span_ms if span_ms else None,
        kernel_count=len(durations),
        kernel_us_p50=p50,
        kernel_us_p90=p90,
        kernels_under_10us_frac=sum(d < 10.0 for d in durations) / len(durations) if durations else None,
        top_ops=tuple(OpStat(name=n, count=int(c), total_us=t, kind="cpu_op") for n, (c, t) in top_ops),
        top_kernels=tuple(
            OpStat(name=n, count=int(c), total_us=t, kind="nccl" if is_nccl else "kernel")
            for n, (c, t, is_nccl) in top_kernels
        ),
        memcpy=tuple(
            MemcpyStat(kind=kind, pinned=pinned, count=c, bytes=b if known else None, total_us=t)
            for (kind, pinned), (c, b, t, known) in sorted(memcpy.items(), key=lambda kv: (kv[0][0], str(kv[0][1])))
        ),
        sync_calls=sync_calls,
        sync_ms=sync_us / 1000.0,
        alloc_calls=alloc_calls,
        alloc_ms=alloc_us / 1000.0,
        nccl_ms=nccl_us / 1000.0,
        nccl_overlap_frac=overlap,
        gloo_ms=sum(e - s for s, e in _union(gloo)) / 1000.0,
        launch_count=launches,
        note=note,
        gpu_span_ms=span_ms,
        kernel_ms=_length_ms(kernel_union) if has_device else None,
        memcpy_ms=max(0.0, copy_ms) if has_device else None,
        flops=window_flops(cpu_ops),
    )
