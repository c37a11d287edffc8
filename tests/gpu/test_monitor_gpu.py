"""The monitor on a real GPU (run on the device machine: ``pytest -m gpu tests/gpu/test_monitor_gpu.py``)."""

from __future__ import annotations

import json
import os
import time

import pytest

from gpudoctor.collectors.nvml import CLOCK_EVENT_REASONS, GpuSampler

pytestmark = pytest.mark.gpu
KNOWN_REASONS = {name for _, name in CLOCK_EVENT_REASONS}


@pytest.fixture(scope="module")
def cuda_tensor():
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("no CUDA GPU")
    x = torch.ones(256, 1024, 1024, device="cuda:0")  # 1 GiB so this process holds GPU memory
    torch.cuda.synchronize()  # sync point: the allocation is done before NVML looks
    yield x
    del x


def test_a_real_sample_has_the_core_metrics(cuda_tensor):
    s = GpuSampler(indices=[0])
    assert s.available, s.unavailable_reason
    sample = s.sample_once()[0]
    s.stop()
    for field in ("util_gpu_pct", "util_mem_pct", "mem_total_bytes", "mem_used_bytes",
                  "mem_free_bytes", "temperature_c", "power_w", "power_limit_w", "sm_clock_mhz",
                  "mem_clock_mhz"):
        assert getattr(sample, field) is not None, (field, sample.unavailable)
    assert sample.mem_used_bytes >= 1 << 30
    assert 0 < sample.power_w <= sample.power_limit_w * 1.5
    if "H200" in sample.name or "H100" in sample.name:
        assert sample.pcie_rx_bytes_per_s is not None and sample.pcie_tx_bytes_per_s is not None
    assert all(r in KNOWN_REASONS or r.startswith("other_0x") for r in sample.throttle_reasons)
    # in a container NVML may list no process, or host pids: check ours only when it is there
    mine = [p for p in sample.processes if p.pid == os.getpid()]
    if mine:  # absent when NVML reports pids of another pid namespace (containers)
        assert mine[0].used_memory_bytes is None or mine[0].used_memory_bytes >= 1 << 30
        assert "pytest" in mine[0].command or "python" in mine[0].command


def test_the_thread_keeps_10hz(cuda_tensor):
    with GpuSampler(interval=0.1, indices=[0]) as s:
        time.sleep(2.0)
    n = len(s.samples())
    assert 15 <= n <= 22, n
    assert s.cpu_time_s() < 0.2  # well under 10 % of a core over 2 s


def test_cli_once_json_on_a_gpu(cuda_tensor):
    from typer.testing import CliRunner

    from gpudoctor.cli.app import app

    try:  # click < 8.2 mixes stderr into stdout unless told not to
        runner = CliRunner(mix_stderr=False)
    except TypeError:
        runner = CliRunner()
    result = runner.invoke(app, ["monitor", "--once", "--json", "--gpus", "0"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["gpu_unavailable_reason"] == ""
    assert data["gpus"][0]["mem_total_bytes"] > 0


def test_parity_readings_on_a_real_gpu(cuda_tensor):
    """fan, P-state, encoder/decoder, NVLink, MIG, per-process SM %: a value or n/a with a reason."""
    with GpuSampler(interval=0.2, indices=[0]) as s:
        time.sleep(1.5)  # two reads of the once-a-second readings
    sample = s.samples()[-1]
    assert sample.uuid.startswith("GPU-") and sample.pci_bus_id.count(":") == 2
    for value, metric in ((sample.fan_speed_pct, "fan"), (sample.pstate, "pstate"),
                          (sample.encoder_util_pct, "encoder"),
                          (sample.decoder_util_pct, "decoder"),
                          (sample.nvlink_rx_bytes, "nvlink")):
        assert value is not None or metric in (sample.unavailable or {}), metric
    if "H200" in sample.name or "H100" in sample.name:
        assert sample.pstate is not None and 0 <= sample.pstate <= 15
    mine = [p for p in sample.processes if p.pid == os.getpid()]
    if mine:
        assert mine[0].host_rss_bytes is not None and mine[0].host_rss_bytes > 0


def test_selecting_the_gpu_by_uuid_and_bus_id(cuda_tensor):
    first = GpuSampler(indices=[0])
    sample = first.sample_once()[0]
    first.stop()
    for selector in (sample.uuid, sample.uuid[:12], sample.pci_bus_id):
        s = GpuSampler(indices=[selector])
        assert [x.index for x in s.sample_once()] == [0], selector
        s.stop()


def test_prometheus_scrape_serves_util_memory_and_power(cuda_tensor):
    import socket
    import threading
    import urllib.request

    from prometheus_client.parser import text_string_to_metric_families
    from typer.testing import CliRunner

    from gpudoctor.cli.app import app

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    done = {}
    thread = threading.Thread(target=lambda: done.update(r=CliRunner().invoke(app, [
        "monitor", "--prometheus", f"127.0.0.1:{port}", "--gpus", "0", "--duration", "4",
        "--interval", "0.5"])))
    thread.start()
    text, deadline = "", time.monotonic() + 20
    while "DCGM_FI_DEV_POWER_USAGE" not in text and time.monotonic() < deadline:
        time.sleep(0.3)
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2) as r:
                text = r.read().decode()
        except OSError:
            pass
    thread.join(30)
    assert done["r"].exit_code == 0, done["r"].output
    values = {s.name: s for fam in text_string_to_metric_families(text) for s in fam.samples
              if s.labels.get("gpu") == "0"}
    assert 0 <= values["DCGM_FI_DEV_GPU_UTIL"].value <= 100
    assert values["DCGM_FI_DEV_FB_USED"].value >= 1024  # the 1 GiB tensor, in MiB
    assert values["DCGM_FI_DEV_POWER_USAGE"].value > 0
    assert values["DCGM_FI_DEV_GPU_UTIL"].labels["UUID"].startswith("GPU-")
