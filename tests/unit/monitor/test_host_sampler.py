"""HostSampler with the real psutil: CPU, RAM, and the process tree under a root pid."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from gpudoctor.collectors.host import HostSampler, command_for_pid


def test_a_sample_has_cpu_and_ram():
    s = HostSampler(interval=0.1)
    time.sleep(0.1)
    sample = s.sample_once()
    assert 0.0 <= sample.cpu_pct <= 100.0
    assert 0.0 <= sample.busiest_core_pct <= 100.0
    assert 0 < sample.ram_used_bytes < sample.ram_total_bytes
    assert sample.tree_pids == () and sample.tree_cpu_pct is None


def test_the_tree_under_a_root_pid_includes_its_children():
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        s = HostSampler(interval=0.1, root_pid=os.getpid())
        sample = s.sample_once()
        assert os.getpid() in sample.tree_pids and child.pid in sample.tree_pids
        assert sample.tree_rss_bytes > 0 and sample.tree_cpu_pct is not None
    finally:
        child.kill()
        child.wait()


def test_a_root_pid_that_is_gone_gives_an_empty_tree():
    s = HostSampler(root_pid=999_999_999)
    sample = s.sample_once()
    assert sample.tree_pids == () and sample.tree_rss_bytes is None


def test_thread_collects_into_a_bounded_ring():
    seen = []
    with HostSampler(interval=0.02, maxlen=3, on_sample=seen.append) as s:
        deadline = time.monotonic() + 5
        while len(seen) < 5 and time.monotonic() < deadline:
            time.sleep(0.02)
    assert len(seen) >= 5 and len(s.samples()) == 3
    assert s.latest() == s.samples()[-1]


def test_command_for_pid_reads_or_returns_empty():
    assert "python" in command_for_pid(os.getpid()).lower() or "pytest" in command_for_pid(os.getpid())
    assert command_for_pid(999_999_999) == ""


def test_bad_interval():
    with pytest.raises(ValueError, match="interval must be > 0"):
        HostSampler(interval=-1)


def test_the_first_threaded_sample_measures_a_real_interval():
    """psutil keeps CPU-percent state per thread: the sampler thread must prime its own."""
    with HostSampler(interval=0.2) as s:
        end = time.monotonic() + 0.5
        while time.monotonic() < end:  # keep one core busy
            pass
    first = s.samples()[0]
    assert first.busiest_core_pct > 0.0
