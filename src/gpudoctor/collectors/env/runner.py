"""Run the torch probe in a subprocess with a timeout and turn its JSON lines into facts.

The subprocess gets its own session so that a hang can be ended with its whole process group
(the probe and its NCCL workers); every line printed before the hang is kept.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from gpudoctor.records.base import from_dict
from gpudoctor.records.env import GpuProbe, NcclProbe, ProbeRun, TorchFacts

PROBE_MODULE = "gpudoctor.collectors.env.probe"


class ProbeProcess:
    """A started probe; :meth:`finish` waits (up to the deadline) and parses what it printed."""

    def __init__(self, timeout_s: float, argv: Sequence[str] | None = None) -> None:
        self.timeout_s = timeout_s
        self.argv = list(argv) if argv is not None else [
            sys.executable, "-m", PROBE_MODULE, "--budget-s", f"{timeout_s:g}"]
        env = dict(os.environ)
        src = str(Path(__file__).resolve().parents[3])  # the folder holding the gpudoctor package
        env["PYTHONPATH"] = src + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
        self.started = time.perf_counter()
        self.proc = subprocess.Popen(self.argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                     stdin=subprocess.DEVNULL, text=True, env=env,
                                     start_new_session=True)

    @property
    def pid(self) -> int:
        return self.proc.pid

    def finish(self) -> dict[str, Any]:
        """Wait for the probe; on timeout kill its process group. Returns the parsed pieces."""
        remaining = self.timeout_s - (time.perf_counter() - self.started)
        timed_out = False
        try:
            out, err = self.proc.communicate(timeout=max(0.1, remaining))
        except subprocess.TimeoutExpired:
            timed_out = True
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)  # the probe and the workers it started
            except ProcessLookupError:
                pass
            out, err = self.proc.communicate()
        duration_ms = (time.perf_counter() - self.started) * 1000.0
        return parse_probe_output(out, err, returncode=self.proc.returncode, timed_out=timed_out,
                                  timeout_s=self.timeout_s, duration_ms=duration_ms)


def parse_probe_output(out: str, err: str, *, returncode: int | None, timed_out: bool,
                       timeout_s: float, duration_ms: float) -> dict[str, Any]:
    """Turn the probe's JSON lines into ``probe``, ``torch``, ``devices``, ``p2p``, ``nccl``."""
    stage, done, error = "", False, ""
    torch: TorchFacts | None = None
    devices: list[GpuProbe] = []
    p2p = nccl = None
    for line in out.splitlines():
        try:
            item = json.loads(line)
        except json.JSONDecodeError:
            continue  # something else printed to stdout (a sitecustomize, a library)
        if not isinstance(item, dict):
            continue
        kind = item.get("kind")
        if kind == "begin":
            stage = item.get("stage", "")
        elif kind == "torch":
            torch = from_dict(TorchFacts, item["facts"])
        elif kind == "torch_error":
            error = item.get("error", "")
        elif kind == "device":
            devices.append(from_dict(GpuProbe, item["probe"]))
        elif kind == "p2p":
            p2p = tuple(tuple(bool(v) for v in row) for row in item["matrix"])
        elif kind == "nccl":
            nccl = from_dict(NcclProbe, item["result"])
        elif kind == "done":
            done = True
    if timed_out:
        status = "timeout"
    elif done and returncode == 0:
        status, stage = "ok", ""
    else:
        status = "crashed"
    tail = "\n".join(err.strip().splitlines()[-15:])[-2000:]
    probe = ProbeRun(status=status, timeout_s=timeout_s, duration_ms=duration_ms, stage=stage,
                     returncode=returncode, error=error, stderr_tail=tail)
    return {"probe": probe, "torch": torch, "devices": tuple(devices), "p2p": p2p, "nccl": nccl}
