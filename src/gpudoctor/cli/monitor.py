"""``gpudoctor monitor``: a live GPU and host view, a CSV/JSONL logger, a Prometheus exporter and
a soak summary.

Parses options, starts :class:`~gpudoctor.collectors.nvml.GpuSampler` and
:class:`~gpudoctor.collectors.host.HostSampler` (logging through
:class:`~gpudoctor.collectors.sample_log.SampleLog`, serving through
:class:`~gpudoctor.report.prometheus.SamplesCollector`) and renders
:func:`~gpudoctor.report.monitor_view.render_monitor`; the soak summary is
:func:`~gpudoctor.analysis.soak.summarize_soak` rendered by
:func:`~gpudoctor.report.soak_view.render_soak`. NVML, psutil, rich and prometheus-client are
imported inside the command so ``gpudoctor --help`` stays fast. Tests inject a fake NVML by
monkeypatching ``gpudoctor.collectors.nvml.default_nvml``.
"""

from __future__ import annotations

import json
import queue
import sys
import threading
import time
from collections import deque
from pathlib import Path

import typer

from gpudoctor.cli.output import fail, stderr_console

MIN_INTERVAL_S = 0.1
HOST_MIN_INTERVAL_S = 0.5
VIEW_MIN_PERIOD_S = 0.25
RING = 256  # samples kept per GPU for the view; the log holds the whole stream
SUMMARY_RING = 43200  # with --summary and no --log: 6 h at 0.5 s kept for the summary
TRAIL_STEP_S = 5.0  # the memory trail of the leak hint keeps a point every 5 s ...
TRAIL_POINTS = 360  # ... for the last 30 minutes
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


LOCAL_HOST = "127.0.0.1"  # the endpoint has no authentication: this machine only unless widened


def parse_listen(text: str, host: str | None = None) -> tuple[str, int]:
    """``"9400"`` -> ``(host or "127.0.0.1", 9400)``: the endpoint is unauthenticated, so it stays
    on this machine unless ``--prometheus-host`` widens it; ``"ADDR:9400"`` -> that address (giving
    ``host`` too is a usage error). Bad text -> usage error."""
    addr, sep, port = text.strip().rpartition(":")
    if not port.isdigit() or not 0 <= int(port) <= 65535:
        fail(f"--prometheus takes PORT or ADDR:PORT, like 9400 or 127.0.0.1:9400 (got {text!r})")
    addr = addr.strip("[]")
    host = None if host is None else host.strip().strip("[]")
    if sep and addr and host is not None and host != addr:
        fail(f"--prometheus {text} names an address and --prometheus-host names {host}: "
             "give the address once")
    if sep and not addr:  # dcgm-exporter's ":9400" means every interface: make that a choice
        fail(f"--prometheus {text}: an empty address is ambiguous; give 9400 for this machine "
             "only or 0.0.0.0:9400 for every interface")
    return addr or (host if host is not None else LOCAL_HOST), int(port)


class MemoryTrail:
    """Per GPU, memory used every ``TRAIL_STEP_S`` over the last minutes: the leak hint's input
    (the view's ring holds only the last seconds at a fast interval). Thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._points: dict[int, deque[tuple[float, float]]] = {}

    def add(self, sample) -> None:
        if sample.mem_used_bytes is None:
            return
        with self._lock:
            points = self._points.setdefault(sample.index, deque(maxlen=TRAIL_POINTS))
            if not points or sample.timestamp_s - points[-1][0] >= TRAIL_STEP_S:
                points.append((sample.timestamp_s, float(sample.mem_used_bytes)))

    def snapshot(self) -> dict[int, list[tuple[float, float]]]:
        with self._lock:
            return {i: list(p) for i, p in self._points.items()}


def _line(kind: str, record: object) -> str:
    from gpudoctor.records.base import to_dict

    return json.dumps({kind: to_dict(record)}, separators=(",", ":"), allow_nan=False)


def register(app: typer.Typer) -> None:
    @app.command()
    def monitor(
        logfile: Path | None = typer.Argument(
            None, show_default=False, metavar="LOGFILE", help="With --summary: a log written by "
            "--log to summarise (its <stem>.host.<suffix> sibling too), or a `gpudoctor run` "
            "directory; nothing is sampled then."
        ),
        log: Path | None = typer.Option(
            None, "--log", "--out", "-o", help="Append samples to FILE: *.csv (nvidia-smi columns "
            "first) or *.jsonl; host samples go to FILE's sibling <stem>.host.<suffix>."
        ),
        once: bool = typer.Option(False, "--once", help="Take one snapshot and exit."),
        json_output: bool = typer.Option(
            False, "--json", help="Print JSON: one document with --once, else one line a sample."
        ),
        interval: float = typer.Option(0.5, "--interval", help="Seconds between samples (>= 0.1)."),
        duration: float | None = typer.Option(
            None, "--duration", help="Stop after this many seconds (default: until Ctrl-C)."
        ),
        gpus: str | None = typer.Option(
            None, "--gpus", help="GPUs to watch, as nvidia-smi -i takes them: indices, UUIDs or "
            "PCI bus ids, e.g. 0,1 or GPU-5e2b9d1a or 00000000:18:00.0."
        ),
        pid: int | None = typer.Option(
            None, "--pid", help="Root pid of a job: its process tree is measured and its GPU "
            "processes marked."
        ),
        summary: bool = typer.Option(
            False, "--summary", help="At the end, print the soak summary: mean, spread and "
            "fluctuation of utilization, clocks and power, throttle time by reason, the memory "
            "trend, a verdict; exit 1 when a GPU ran unstable. With LOGFILE: summarise that log."
        ),
        prometheus: str | None = typer.Option(
            None, "--prometheus", metavar="[ADDR:]PORT", help="Serve the samples to Prometheus "
            "at http://ADDR:PORT/metrics (DCGM exporter names; PORT alone: this machine only, "
            "see --prometheus-host; 0: a free port)."
        ),
        prometheus_host: str | None = typer.Option(
            None, "--prometheus-host", metavar="ADDR", show_default=False, help="Address for "
            "--prometheus PORT (default 127.0.0.1, this machine only); 0.0.0.0: every interface. "
            "The endpoint has no authentication: widen it only on a trusted network."
        ),
    ) -> None:
        """Watch GPU and host: utilization, memory, power, clocks, PCIe, NVLink, processes; log
        them, serve them to Prometheus, judge a soak.

        Needs no torch: it reads NVML (the NVIDIA driver) and the host. Without a GPU it shows the
        host only. Ctrl-C stops it (exit 0 after --log is closed). A --log run ends with the soak
        summary of what it logged.

        \b
        Examples:
          gpudoctor monitor
          gpudoctor monitor --once --json
          gpudoctor monitor --log gpu.csv --interval 1 --duration 600
          gpudoctor monitor --pid 12345 --gpus 0,GPU-5e2b9d1a
          gpudoctor monitor --prometheus 9400 --interval 1
          gpudoctor monitor --prometheus 9400 --prometheus-host 0.0.0.0
          gpudoctor monitor --log soak.csv --interval 5 --duration 86400
          gpudoctor monitor --summary soak.csv
        """
        if prometheus_host is not None and prometheus is None:
            fail("--prometheus-host sets the address of --prometheus PORT: give --prometheus too")
        if logfile is not None:
            if not summary:
                fail(f"{logfile}: a log file is read with --summary "
                     f"(gpudoctor monitor --summary {logfile}); to write one, use --log")
            if log is not None or once or prometheus is not None:
                fail("--summary LOGFILE reads a finished log: leave out --log, --once and "
                     "--prometheus")
            from gpudoctor.cli.monitor_summary import summarise_log

            raise typer.Exit(summarise_log(logfile, json_output))
        if once and (summary or prometheus is not None):
            fail("--once takes one snapshot: --summary and --prometheus need a running monitor")
        listen = None if prometheus is None else parse_listen(prometheus, prometheus_host)
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
        started = time.time()
        verdict = None
        try:
            gpu, host = _monitor(
                GpuSampler, HostSampler, sink, once=once, json_output=json_output,
                interval=interval, duration=duration, indices=indices, pid=pid,
                keep=SUMMARY_RING if summary and sink is None else RING, listen=listen,
            )
        finally:
            if sink is not None:
                sink.close()
                what = f"{sink.gpu_rows} GPU rows to {sink.path}"
                if sink.host_rows:
                    what += f", {sink.host_rows} host rows to {sink.host_path}"
                stderr_console().print(f"logged {what}", highlight=False)
        if summary or (sink is not None and not json_output and not once):
            from gpudoctor.cli.monitor_summary import summarise_run

            verdict = summarise_run(sink, gpu, host, started, json_output)
        if summary and verdict == "unstable":
            raise typer.Exit(1)


def _monitor(GpuSampler, HostSampler, sink, *, once, json_output, interval, duration, indices, pid,
             keep=RING, listen=None):
    """Sample, view, log and serve until the duration ends or Ctrl-C; returns the samplers."""
    from gpudoctor.cli.output import emit_json, stdout_console
    from gpudoctor.report.monitor_view import render_monitor

    events: queue.SimpleQueue = queue.SimpleQueue()
    stream = json_output and not once
    trail = MemoryTrail()

    def on_gpu(sample):
        trail.add(sample)
        if sink is not None:
            sink.write_gpu(sample)
        if stream:
            events.put(("gpu", sample))

    def on_host(sample):
        if sink is not None:
            sink.write_host(sample)
        if stream:
            events.put(("host", sample))

    gpu = GpuSampler(interval=interval, indices=indices, on_sample=on_gpu, maxlen=keep)
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
            memory_trails=trail.snapshot(),
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
        return gpu, host

    live = None
    console = stdout_console()
    period = max(interval, VIEW_MIN_PERIOD_S)
    if not json_output and console.is_terminal:
        from rich.live import Live

        live = Live(view(), console=console, auto_refresh=False, transient=False)
    deadline = None if duration is None else time.monotonic() + duration
    server = None
    try:  # a Ctrl-C while the samplers start still stops them and prints the final view
        gpu.start()
        host.start()
        if listen is not None:
            server = _serve(gpu, host, listen)
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
        if server is not None:
            server.shutdown()
            server.server_close()
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
    return gpu, host


def _serve(gpu, host, listen):
    """Start the Prometheus endpoint over the samplers' newest samples; say where on stderr."""
    import socket

    try:
        from prometheus_client import CollectorRegistry, start_http_server
    except ImportError:
        fail("--prometheus needs prometheus-client: pip install prometheus-client")
    from gpudoctor.report.prometheus import SamplesCollector

    def snapshot():
        latest = gpu.latest()
        return [latest[i] for i in sorted(latest)], host.latest()

    registry = CollectorRegistry(auto_describe=False)  # not the process-global registry
    registry.register(SamplesCollector(snapshot, hostname=socket.gethostname()))
    addr, port = listen
    try:
        server, _ = start_http_server(port, addr=addr, registry=registry)
    except OSError as exc:
        fail(f"--prometheus {addr}:{port}: cannot listen there ({exc}); pick another port")
    shown = f"[{addr}]" if ":" in addr else addr
    stderr_console().print(
        f"serving Prometheus metrics on http://{shown}:{server.server_port}/metrics", highlight=False
    )
    return server


def _drain(events: queue.SimpleQueue) -> None:
    while True:
        try:
            kind, record = events.get_nowait()
        except queue.Empty:
            break
        sys.stdout.write(_line(kind, record) + "\n")
    sys.stdout.flush()
