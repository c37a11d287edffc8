"""``monitor --prometheus``: DCGM-exporter names and labels, per-process and host metrics, scraped
over HTTP — with the fake NVML in-process, and from a real process on this GPU-less machine."""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families
from typer.testing import CliRunner

import gpudoctor.collectors.nvml as nvml_mod
from gpudoctor.cli.app import app
from gpudoctor.collectors.sample_log import host_log_path, read_gpu_log, read_host_log
from gpudoctor.records.units import MIB
from gpudoctor.report.monitor_view import history_by_gpu
from gpudoctor.report.prometheus import SamplesCollector, metric_families

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "monitor"


def _recorded():
    latest, _ = history_by_gpu(read_gpu_log(FIXTURES / "fake-samples.jsonl"))
    host = read_host_log(host_log_path(FIXTURES / "fake-samples.jsonl"))[-1]
    return latest, host


def _scrape(text: str) -> dict[tuple[str, frozenset], float]:
    out = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            out[(s.name, frozenset(s.labels.items()))] = s.value
    return out


def _find(scrape, name, **labels):
    hits = [v for (n, labs), v in scrape.items() if n == name and set(labels.items()) <= labs]
    assert len(hits) == 1, (name, labels, hits)
    return hits[0]


def test_gpu_metrics_carry_dcgm_names_and_labels():
    latest, host = _recorded()
    fams = {f.name: f for f in metric_families(latest, host, hostname="node7")}
    labels, util = fams["DCGM_FI_DEV_GPU_UTIL"].samples[0]
    assert labels == {"gpu": "0", "UUID": "GPU-5e2b9d1a-0000-4000-8000-000000000000",
                      "pci_bus_id": "00000000:18:00.0", "device": "nvidia0",
                      "modelName": "NVIDIA H200", "Hostname": "node7"}
    assert util == latest[0].util_gpu_pct
    used = fams["DCGM_FI_DEV_FB_USED"].samples[0][1]
    assert used == latest[0].mem_used_bytes // MIB  # whole MiB, as DCGM
    # the T4 gives no power: its series is absent, not 0
    assert [lab["gpu"] for lab, _ in fams["DCGM_FI_DEV_POWER_USAGE"].samples] == ["0"]
    assert [lab["gpu"] for lab, _ in fams["DCGM_FI_DEV_FAN_SPEED"].samples] == ["0"]
    assert [v for _, v in fams["DCGM_FI_DEV_PSTATE"].samples] == [0.0, 8.0]
    procs = fams["gpudoctor_process_gpu_memory_bytes"].samples
    assert [(lab["pid"], lab["process"], v) for lab, v in procs] == [("4242", "python", 40 << 30)]
    assert fams["gpudoctor_process_sm_util"].samples[0][1] == 87.0
    assert fams["gpudoctor_job_rss_bytes"].samples == [({"Hostname": "node7"}, float(host.tree_rss_bytes))]


def test_the_exposition_text_is_stable(golden):
    latest, host = _recorded()
    registry = CollectorRegistry(auto_describe=False)
    registry.register(SamplesCollector(lambda: (latest, host), hostname="node7"))
    text = generate_latest(registry).decode()
    scrape = _scrape(text)
    assert _find(scrape, "gpudoctor_nvlink_rx_bytes_total", gpu="0") == latest[0].nvlink_rx_bytes
    assert _find(scrape, "gpudoctor_clocks_event_reason", gpu="0", reason="sw_power_cap") == 1.0
    golden("monitor/prometheus-fake-samples.txt", text)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _get(url: str, deadline: float) -> str:
    while True:
        try:
            with urllib.request.urlopen(url, timeout=2) as r:
                return r.read().decode()
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)


def test_cli_serves_the_fake_gpus_to_a_scrape(monkeypatch, fake_nvml, stable_commands):
    monkeypatch.setattr(nvml_mod, "default_nvml", lambda: fake_nvml)
    port = _free_port()
    runner = CliRunner(env={"COLUMNS": "100", "NO_COLOR": "1", "TERM": "dumb"})
    result = {}
    thread = threading.Thread(target=lambda: result.update(r=runner.invoke(app, [
        "monitor", "--prometheus", f"127.0.0.1:{port}", "--interval", "0.1", "--duration", "4"])))
    thread.start()
    try:
        deadline = time.monotonic() + 20
        text = _get(f"http://127.0.0.1:{port}/metrics", deadline)
        while not ("DCGM_FI_DEV_GPU_UTIL" in text and "gpudoctor_host_memory_total_bytes" in text) \
                and time.monotonic() < deadline:
            time.sleep(0.1)
            text = _get(f"http://127.0.0.1:{port}/metrics", deadline)
    finally:
        thread.join(30)
    assert result["r"].exit_code == 0, result["r"].output
    scrape = _scrape(text)
    hostname = socket.gethostname()
    for name in ("DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_FB_USED", "DCGM_FI_DEV_POWER_USAGE",
                 "DCGM_FI_DEV_SM_CLOCK", "DCGM_FI_DEV_GPU_TEMP"):
        assert 0 <= _find(scrape, name, gpu="0", Hostname=hostname, modelName="NVIDIA H200")
    assert _find(scrape, "DCGM_FI_DEV_SM_CLOCK", gpu="1") == 1980
    assert _find(scrape, "gpudoctor_process_gpu_memory_bytes", pid="4242") == 40 << 30
    assert _find(scrape, "gpudoctor_gpus") == 2
    assert _find(scrape, "gpudoctor_host_memory_total_bytes") > 0
    assert f"serving Prometheus metrics on http://127.0.0.1:{port}/metrics" in result["r"].stderr


def test_a_real_process_serves_host_metrics_without_a_gpu():
    """End to end on this machine: the real pynvml finds no driver; the host is still served."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    proc = subprocess.Popen(
        [sys.executable, "-m", "gpudoctor", "monitor", "--prometheus", "127.0.0.1:0",
         "--interval", "0.5", "--duration", "20"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
    )
    try:
        port = None
        deadline = time.monotonic() + 30
        while port is None and time.monotonic() < deadline:
            line = proc.stderr.readline()
            m = re.search(r"http://127\.0\.0\.1:(\d+)/metrics", line)
            port = int(m.group(1)) if m else None
        assert port, "the monitor never said where it serves"
        text = _get(f"http://127.0.0.1:{port}/metrics", deadline)
        while "gpudoctor_host_cpu_percent" not in text and time.monotonic() < deadline:
            time.sleep(0.2)
            text = _get(f"http://127.0.0.1:{port}/metrics", deadline)
    finally:
        proc.terminate()
        proc.communicate(timeout=30)
    scrape = _scrape(text)
    assert _find(scrape, "gpudoctor_gpus") == 0
    assert 0 <= _find(scrape, "gpudoctor_host_cpu_percent") <= 100
    assert _find(scrape, "gpudoctor_host_memory_used_bytes") > 0
    assert not any(n.startswith("DCGM_") for n, _ in scrape)


@pytest.mark.parametrize("args,message", [
    (["--prometheus", "nine"], "--prometheus takes PORT or ADDR:PORT"),
    (["--prometheus", "70000"], "--prometheus takes PORT or ADDR:PORT"),
    (["--prometheus", "9400", "--once"], "--once takes one snapshot"),
    (["--prometheus", ":9400", "--duration", "0.5"], "0.0.0.0:9400 for every interface"),
    (["--prometheus-host", "0.0.0.0"], "give --prometheus too"),
    (["--prometheus", "10.0.0.1:9400", "--prometheus-host", "0.0.0.0"], "give the address once"),
])
def test_bad_prometheus_options_are_usage_errors(args, message, monkeypatch, fake_nvml):
    monkeypatch.setattr(nvml_mod, "default_nvml", lambda: fake_nvml)
    result = CliRunner().invoke(app, ["monitor", *args])
    assert result.exit_code == 2, result.output
    assert message in " ".join(result.stderr.split())


def test_a_port_in_use_is_a_clear_error(monkeypatch, fake_nvml):
    monkeypatch.setattr(nvml_mod, "default_nvml", lambda: fake_nvml)
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = CliRunner().invoke(app, ["monitor", "--prometheus", f"127.0.0.1:{port}",
                                          "--duration", "1"])
    assert result.exit_code == 2, result.output
    assert "cannot listen there" in " ".join(result.stderr.split())


@pytest.mark.parametrize("text,host,expected", [
    ("9400", None, ("127.0.0.1", 9400)),  # unauthenticated: this machine only by default
    ("9400", "0.0.0.0", ("0.0.0.0", 9400)),
    ("9400", "[::]", ("::", 9400)),
    ("10.0.0.5:9400", None, ("10.0.0.5", 9400)),
    ("[::1]:0", None, ("::1", 0)),
    ("0.0.0.0:9400", "0.0.0.0", ("0.0.0.0", 9400)),
])
def test_listen_address_defaults_to_this_machine(text, host, expected):
    from gpudoctor.cli.monitor import parse_listen

    assert parse_listen(text, host) == expected


def test_port_alone_serves_on_loopback_only(monkeypatch, fake_nvml):
    """``--prometheus PORT`` binds 127.0.0.1, not every interface; --prometheus-host widens it."""
    import gpudoctor.cli.monitor as monitor_mod

    monkeypatch.setattr(nvml_mod, "default_nvml", lambda: fake_nvml)
    seen = []
    monkeypatch.setattr(monitor_mod, "_serve", lambda gpu, host, listen: seen.append(listen))
    for extra, addr in (([], "127.0.0.1"), (["--prometheus-host", "0.0.0.0"], "0.0.0.0")):
        result = CliRunner().invoke(app, ["monitor", "--prometheus", "9400", *extra,
                                          "--interval", "0.1", "--duration", "0.3"])
        assert result.exit_code == 0, result.output
        assert seen[-1] == (addr, 9400)
