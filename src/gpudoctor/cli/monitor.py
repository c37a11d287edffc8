"""``gpudoctor monitor``: a live GPU and host view, and a CSV/JSONL logger.

Parses options, starts :class:`~gpudoctor.collectors.nvml.GpuSampler` and
:class:`~gpudoctor.collectors.host.HostSampler` (logging through
:class:`~gpudoctor.collectors.sample_log.SampleLog`) and renders
:func:`~gpudoctor.report.monitor_view.render_monitor`. NVML, psutil and rich are imported inside
the command so ``gpudoctor --help`` stays fast. Tests inject a fake NVML by monkeypatching
``gpudoctor.collectors.nvml.default_nvml``.
"""

from __future__ import annotations

import json
import queue
import sys
import time
from pathlib import Path

import typer

from gpudoctor.cli.output import fail, stderr_console

MIN_INTERVAL_S = 0.1
HOST_MIN_INTERVAL_S = 0.5
VIEW_MIN_PERIOD_S = 0.25
RING = 256  # samples kept per GPU for the view; the log holds the whole stream
_pause = time.sleep  # the main loop's wait; tests replace it to simulate Ctrl-C


def parse_gpus(text: str | None) -> list[int | str] | None:
    """``"0,1"`` -> ``[0, 1]``; UUIDs and PCI bus ids stay text (the sampler resolves them, as
    ``nvidia-smi -i`` does); ``None``/empty -> ``None`` (every GPU). Bad text -> usage error."""
    if text is None or not text.strip():
        return None
    out: list[int | str] = []
    for part in text.split(","):
        part = part.strip()
        named = part.upper().startswith(("GPU-", "MIG-")) or ":" in part
        if not (part.isdigit() or named):
            fail("--gpus takes GPU indices, UUIDs (GPU-…) or PCI bus ids (00000000:07:00.0) "
                 f"separated by commas, like 0,1 (got {text!r})")
        value: int | str = int(part) if part.isdigit() else part
        if value in out:
            fail(f"--gpus lists GPU {part} twice; list each GPU once")
        out.append(value)
    return out


def _line(kind: str, record: object) -> str:
    from gpudoctor.records.base import to_dict

    return json.dumps({kind: to_dict(record)}, separators=(",", ":"), allow_nan=False)


def register(app: typer.Typer) -> None:
    @app.command()
    def monitor(
        log: Path | None = typer.Option(
            None, "--log", help="Append samples to FILE: *.csv (nvidia-smi columns first) or "
            "*.jsonl; host samples go to FILE's sibling <stem>.host.<suffix>."
        ),
        once: bool = typer.Option(False, "--once", help="Take one snapshot and exit."),
        json_output: bool = typer.Option(
            False, "--json", help="Print JSON: one document with --once, else one line a sample."
        ),
        interval: float = typer.Option(0.5, "--interval", help="Seconds between samples (>= 0.1)."),
        duration: float | None = typer.Option(
            None, "--duration", help="Stop after this many seconds (default: until Ctrl-C)."
        ),
        gpus: str | None = typer.Option(None, "--gpus", help="GPU indices to watch, e.g. 0,1."),
        pid: int | None = typer.Option(
            None, "--pid", help="Root pid of a job: its process tree is measured and its GPU "
            "processes marked."
        ),
    ) -> None:
        """Watch GPU and host: utilization, memory, power, clocks, PCIe, processes; log them.

        Needs no torch: it reads NVML (the NVIDIA driver) and the host. Without a GPU it shows the
        host only. Ctrl-C stops it (exit 0 after --log is closed).

        \b
        Examples:
          gpudoctor monitor
          gpudoctor monitor --once --json
          gpudoctor monitor --log gpu.csv --interval 1 --duration 600
          gpudoctor monitor --pid 12345 --gpus 0,1
        """
        if not interval >= MIN_INTERVAL_S:
            fail(
                f"--interval must be at least {MIN_INTERVAL_S} s (got {interval}); NVML refreshes "
                "utilization only every ~0.17 s, so faster sampling repeats values"
            )
        if duration is not None and not duration > 0:
            fail(f"--duration must be a positive number of seconds (got {duration})")
        indices = parse_gpus(gpus)
        import psutil

        if pid is not None and not psutil.pid_exists(pid):
            fail(f"--pid {pid}: no such process; pass the pid of the job's root process")

        from gpudoctor.collectors.host import HostSampler
        from gpudoctor.collectors.nvml import GpuSampler
        from gpudoctor.collectors.sample_log import SampleLog

        sink = None
        if log is not None:
            try:
                sink = SampleLog(log)
            except (ValueError, OSError) as exc:
                fail(str(exc))
        try:
            _monitor(
                GpuSampler, HostSampler, sink, once=once, json_output=json_output,
                interval=interval, duration=duration, indices=indices, pid=pid,
            )
        finally:
            if sink is not None:
                sink.close()
                what = f"{sink.gpu_rows} GPU rows to {sink.path}"
                if sink.host_rows:
                    what += f", {sink.host_rows} host rows to {sink.host_path}"
                stderr_console().print(f"logged {what}", highlight=False)


def _monitor(GpuSampler, HostSampler, sink, *, once, json_output, interval, duration, indices, pid):
    from gpudoctor.cli.output import emit_json, stdout_console
    from gpudoctor.report.monitor_view import render_monitor

    events: queue.SimpleQueue = queue.SimpleQueue()
    stream = json_output and not once

    def on_gpu(sample):
        if sink is not None:
            sink.write_gpu(sample)
        if stream:
            events.put(("gpu", sample))

    def on_host(sample):
        if sink is not None:
            sink.write_host(sample)
        if stream:
            events.put(("host", sample))

    gpu = GpuSampler(interval=interval, indices=indices, on_sample=on_gpu, maxlen=RING)
    try:
        reason = gpu.unavailable_reason
    except ValueError as exc:  # an index that does not exist
        fail(f"--gpus: {exc}")
    if reason:
        stderr_console().print(
            f"[yellow]no GPU:[/] {reason}. Showing host metrics only.", highlight=False
        )
    host = HostSampler(interval=max(interval, HOST_MIN_INTERVAL_S), root_pid=pid, on_sample=on_host)

    def view():
        h = host.latest()
        latest = list(gpu.latest().values())
        history = {s.index: gpu.history(s.index, 32) for s in latest}
        return render_monitor(
            latest, history, h, gpu_unavailable=reason,
            job_pids=frozenset(h.tree_pids) if h is not None and pid is not None else None,
        )

    if once:
        samples = gpu.sample_once() if not reason else []
        time.sleep(0.2)  # psutil measures CPU use between two readings
        h = host.sample_once()
        gpu.stop()
        if json_output:
            emit_json({"gpus": samples, "host": h, "gpu_unavailable_reason": reason})
        else:
            stdout_console().print(view())
        return

    live = None
    console = stdout_console()
    period = max(interval, VIEW_MIN_PERIOD_S)
    if not json_output and console.is_terminal:
        from rich.live import Live

        live = Live(view(), console=console, auto_refresh=False, transient=False)
    deadline = None if duration is None else time.monotonic() + duration
    gpu.start()
    host.start()
    try:
        if live is not None:
            live.start()
        while deadline is None or time.monotonic() < deadline:
            wait = period if deadline is None else min(period, max(0.0, deadline - time.monotonic()))
            _pause(wait)
            if stream:
                _drain(events)
            elif live is not None:
                live.update(view(), refresh=True)
    except KeyboardInterrupt:
        pass  # Ctrl-C: stop cleanly; every logged line is already flushed
    finally:
        gpu.stop()
        host.stop()
        if stream:
            _drain(events)
        elif live is not None:
            live.update(view(), refresh=True)
            live.stop()
        else:  # not a terminal (a pipe or a file): print the final view once
            console.print(view())
        for sampler in (gpu, host):
            if sampler.last_error is not None:
                stderr_console().print(
                    f"[yellow]warning:[/] writing samples failed: {sampler.last_error}",
                    highlight=False,
                )


def _drain(events: queue.SimpleQueue) -> None:
    while True:
        try:
            kind, record = events.get_nowait()
        except queue.Empty:
            break
        sys.stdout.write(_line(kind, record) + "\n")
    sys.stdout.flush()
