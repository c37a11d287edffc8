"""What the parent does while the child trains: copy its output live, sample GPUs and host."""

from __future__ import annotations

import os
import threading
from collections import deque
from pathlib import Path
from typing import IO, Any

from gpudoctor.records.base import JsonlWriter
from gpudoctor.records.rundir import GPU_SAMPLES, HOST_SAMPLES, KIND_GPU, KIND_HOST


class Tee:
    """Copy a child pipe to one of our streams and to ``stdout.log``, live."""

    def __init__(self, pipe: IO[bytes], target: IO[bytes] | None, log: IO[bytes], lock: threading.Lock, tail: deque) -> None:
        self.thread = threading.Thread(target=self._run, args=(pipe, target, log, lock, tail), daemon=True)
        self.thread.start()

    @staticmethod
    def _run(pipe: IO[bytes], target: IO[bytes] | None, log: IO[bytes], lock: threading.Lock, tail: deque) -> None:
        fd = pipe.fileno()
        partial = b""
        while True:
            try:
                chunk = os.read(fd, 65536)
            except OSError:
                break
            if not chunk:
                break
            with lock:
                try:
                    log.write(chunk)
                    log.flush()
                except ValueError:  # closed: a straggling grandchild wrote after the end
                    pass
            try:
                if target is not None:  # None: quiet (gpudoctor doctor keeps output in the log)
                    target.write(chunk)
                    target.flush()
            except (OSError, ValueError):
                pass  # our terminal went away: keep logging
            lines = (partial + chunk).split(b"\n")
            partial = lines.pop()
            tail.extend(lines)
        if partial:
            tail.append(partial)
        pipe.close()


def start_samplers(run_dir: Path, root_pid: int, notes: list[str]) -> list[Any]:
    """Start the NVML and host samplers (each optional); return the started ones."""
    started: list[Any] = []
    try:
        from gpudoctor.collectors.nvml import GpuSampler
    except ImportError as exc:
        notes.append(f"GPU samples unavailable: {exc}")
        GpuSampler = None  # noqa: N806
    try:
        from gpudoctor.collectors.host import HostSampler
    except ImportError as exc:
        notes.append(f"host samples unavailable: {exc}")
        HostSampler = None  # noqa: N806
    for cls, name, kind, kwargs in (
        (GpuSampler, GPU_SAMPLES, KIND_GPU, {"interval": 0.2}),
        (HostSampler, HOST_SAMPLES, KIND_HOST, {"interval": 0.5, "root_pid": root_pid}),
    ):
        if cls is None:
            continue
        writer = JsonlWriter(run_dir / name, kind=kind)
        try:
            sampler = cls(on_sample=writer.write, **kwargs)
            sampler.__enter__()
        except Exception as exc:  # noqa: BLE001 - sampling is evidence, not a requirement
            notes.append(f"{name}: sampler failed to start ({exc})")
            writer.close()
            continue
        if not sampler.available:
            notes.append(f"{name}: {sampler.unavailable_reason}")
        started.append((sampler, writer))
    return started


def stop_samplers(started: list[Any]) -> None:
    for sampler, writer in started:
        try:
            sampler.__exit__(None, None, None)
        finally:
            writer.close()
