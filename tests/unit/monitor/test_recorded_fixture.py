"""Recorded sample streams in tests/fixtures/monitor/: parse them and render the view.

``fake-samples.jsonl`` is produced here by the fake NVML through the real sampler and writer
(``pytest --update-goldens`` rewrites it). ``h200-samples.jsonl`` is recorded on an H200 by
``tools/gpu/jobs/20_monitor.sh``; once it is committed, the parametrized tests below cover it
too (its view golden is written by the first ``--update-goldens`` run).
"""

from __future__ import annotations

import io
from pathlib import Path

import pytest
from rich.console import Console

from gpudoctor.collectors.nvml import GpuSampler
from gpudoctor.collectors.sample_log import SampleLog, host_log_path, read_gpu_log, read_host_log
from gpudoctor.records.gpu import HostSample
from gpudoctor.report.monitor_view import history_by_gpu, render_monitor

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "monitor"
FAKE = FIXTURES / "fake-samples.jsonl"
STREAMS = sorted(p for p in FIXTURES.glob("*-samples.jsonl") if ".host." not in p.name)


def _write_fake_stream(path: Path, fake_nvml, fake_clock) -> None:
    """5 s at 10 Hz from the fake NVML, and host samples at 2 Hz, as the CLI logs them."""
    with SampleLog(path) as log:
        s = GpuSampler(interval=0.1, on_sample=log.write_gpu, nvml=fake_nvml, clock=fake_clock)
        for tick in range(50):
            s.sample_once()
            if tick % 5 == 4:
                log.write_host(HostSample(
                    timestamp_s=s.samples()[-1].timestamp_s,
                    cpu_pct=10.0 + tick, busiest_core_pct=min(100.0, 40.0 + 2 * tick),
                    ram_used_bytes=(24 + tick) << 30, ram_total_bytes=2015 << 30,
                    tree_cpu_pct=101.5, tree_rss_bytes=(5 << 30) + tick, tree_pids=(4242, 4250),
                ))


def test_fake_fixture_is_current(tmp_path, request, fake_nvml, fake_clock, stable_commands):
    fresh = tmp_path / FAKE.name
    _write_fake_stream(fresh, fake_nvml, fake_clock)
    pairs = [(fresh, FAKE), (host_log_path(fresh), host_log_path(FAKE))]
    if request.config.getoption("--update-goldens") or not FAKE.exists():
        for made, kept in pairs:
            kept.write_text(made.read_text())
    for made, kept in pairs:
        assert made.read_text() == kept.read_text(), f"{kept} is stale: pytest --update-goldens"


@pytest.mark.parametrize("path", STREAMS, ids=lambda p: p.name)
def test_recorded_stream_parses(path: Path):
    gpu = read_gpu_log(path)
    assert gpu, f"{path} holds no GPU sample"
    _, history = history_by_gpu(gpu)
    for samples in history.values():
        times = [s.timestamp_s for s in samples]
        assert times == sorted(times) and len(set(times)) == len(times)
        for s in samples:
            assert s.name
            for pct in (s.util_gpu_pct, s.util_mem_pct):
                assert pct is None or 0.0 <= pct <= 100.0
            if s.mem_total_bytes is not None:
                assert 0 <= s.mem_used_bytes <= s.mem_total_bytes
                assert 0 <= s.mem_free_bytes <= s.mem_total_bytes
    if path.name.startswith("h200"):  # recorded while a bf16 matmul loop ran on GPU 0
        h200 = history[min(history)]
        assert "H200" in h200[0].name
        assert len(h200) >= 30, "about 5 s at 10 Hz was recorded"
        assert max(s.util_gpu_pct for s in h200) >= 50.0
        assert max(s.power_w for s in h200) > min(s.power_w for s in h200)
        # processes may be empty: inside a container NVML often lists none
    host_path = host_log_path(path)
    if host_path.exists():
        host = read_host_log(host_path)
        assert host and all(h.ram_total_bytes for h in host)


@pytest.mark.parametrize("path", STREAMS, ids=lambda p: p.name)
def test_recorded_stream_renders(path: Path, golden):
    latest, history = history_by_gpu(read_gpu_log(path))
    host_path = host_log_path(path)
    host = read_host_log(host_path)[-1] if host_path.exists() else None
    job = frozenset(host.tree_pids) if host is not None and host.tree_pids else None
    console = Console(file=io.StringIO(), width=100, color_system=None)
    console.print(render_monitor(latest, history, host, job_pids=job))
    golden(f"monitor/view-{path.stem}.txt", console.file.getvalue())
