"""GpuSampler against the fake NVML (conftest.py) and against the real pynvml with no driver."""

from __future__ import annotations

import time
import tracemalloc

import pytest

from gpudoctor.collectors import nvml as nvml_mod
from gpudoctor.collectors.nvml import CLOCK_EVENT_REASONS, GpuSampler, decode_clock_event_reasons


def test_reads_every_metric_of_a_full_device(fake_nvml, fake_clock, stable_commands):
    s = GpuSampler(nvml=fake_nvml, clock=fake_clock)
    assert s.available and s.unavailable_reason == ""
    assert s.device_names == {0: "NVIDIA H200", 1: "Tesla T4"}  # bytes names decoded
    first = s.sample_once()[0]
    assert first.timestamp_s == 1_795_000_000.0
    assert (first.util_gpu_pct, first.util_mem_pct) == (53.0, 27.0)
    assert first.mem_total_bytes == 150_754_820_096
    assert first.mem_used_bytes + first.mem_free_bytes == first.mem_total_bytes
    assert (first.power_w, first.power_limit_w) == (145.5, 700.0)  # mW -> W
    assert (first.sm_clock_mhz, first.mem_clock_mhz) == (1980, 2619)
    assert first.pcie_rx_bytes_per_s == 1_500_000 * 1024.0  # KB/s -> B/s
    assert first.pcie_tx_bytes_per_s == 250_000 * 1024.0
    assert first.throttle_reasons == ("gpu_idle",)
    assert first.ecc_errors_uncorrected == 0
    assert first.unavailable is None
    procs = {p.pid: p for p in first.processes}
    assert procs[4242].used_memory_bytes == 42_949_672_960
    assert procs[4242].command == "python train.py --bf16"
    assert procs[999_999_999].used_memory_bytes is None  # NVML "not available"
    assert procs[999_999_999].command == ""  # pid from another namespace: empty, no crash
    second = s.sample_once()[0]
    assert second.throttle_reasons == ("sw_power_cap", "sw_thermal_slowdown")
    assert second.processes is first.processes  # unchanged tuples are shared: a small ring


def test_unsupported_metrics_are_none_with_the_reason_kept_once(fake_nvml, fake_clock):
    s = GpuSampler(nvml=fake_nvml, clock=fake_clock)
    t4 = [s.sample_once()[1] for _ in range(3)]
    for sample in t4:
        assert sample.power_w is None and sample.power_limit_w is None
        assert sample.pcie_rx_bytes_per_s is None and sample.pcie_tx_bytes_per_s is None
        assert sample.ecc_errors_uncorrected is None
        assert sample.processes == ()
        assert sample.util_gpu_pct is not None  # what it can give, it gives
    assert t4[0].unavailable == {
        "power": "not supported by this GPU or driver",
        "power_limit": "not supported by this GPU or driver",
        "pcie": "not supported by this GPU or driver",
        "ecc": "ECC is disabled on this GPU",
        "processes": "not supported by this GPU or driver",
        "fan": "not supported by this GPU or driver",
        "mig": "not supported by this GPU or driver",
        "nvlink": "no NVLink on this GPU",
    }
    assert t4[1].unavailable is t4[0].unavailable is t4[2].unavailable


def test_old_driver_falls_back_to_throttle_reasons(fake_nvml, fake_clock):
    t4 = GpuSampler(nvml=fake_nvml, clock=fake_clock).sample_once()[1]
    assert t4.throttle_reasons == ("gpu_idle", "other_0x1000")


def test_unsupported_metric_is_not_asked_again(fake_nvml, fake_clock):
    calls = []
    original = fake_nvml.nvmlDeviceGetPowerUsage

    def counting(d):
        calls.append(d.name)
        return original(d)

    fake_nvml.nvmlDeviceGetPowerUsage = counting
    s = GpuSampler(nvml=fake_nvml, clock=fake_clock)
    for _ in range(4):
        s.sample_once()
    assert calls.count("Tesla T4") == 1
    assert calls.count("NVIDIA H200") == 4


@pytest.mark.parametrize("bit,name", CLOCK_EVENT_REASONS)
def test_each_clock_event_bit_decodes(bit, name):
    assert decode_clock_event_reasons(bit) == (name,)


def test_clock_event_mask_decodes_all_bits_and_unknown_ones():
    assert decode_clock_event_reasons(0) == ()
    assert decode_clock_event_reasons(0x4 | 0x40 | 0x800) == (
        "sw_power_cap", "hw_thermal_slowdown", "other_0x800"
    )


def test_indices_select_gpus_and_bad_ones_say_what_exists(fake_nvml_factory, fake_clock):
    s = GpuSampler(indices=[1], nvml=fake_nvml_factory(), clock=fake_clock)
    assert [x.index for x in s.sample_once()] == [1]
    bad = GpuSampler(indices=[0, 3], nvml=fake_nvml_factory())
    with pytest.raises(ValueError, match=r"GPU index 3 does not exist.*2 GPU\(s\), indices 0-1"):
        bad.available


def test_real_pynvml_without_a_driver_does_nothing_and_says_why():
    pynvml = pytest.importorskip("pynvml")
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError_LibraryNotFound:
        pass
    else:  # a machine with a driver: this test is about the machine without one
        pynvml.nvmlShutdown()
        pytest.skip("NVML is present here")
    s = GpuSampler(interval=0.1)
    assert s.available is False
    assert "NVML Shared Library Not Found" in s.unavailable_reason
    assert "nvidia-smi" in s.unavailable_reason
    with s:  # start/stop never raise
        time.sleep(0.05)
    assert s.samples() == [] and s.sample_once() == []


def test_init_error_and_import_error(fake_nvml_factory, monkeypatch):
    fake = fake_nvml_factory(init_error=RuntimeError("Driver Not Loaded"))
    s = GpuSampler(nvml=fake)
    assert not s.available and "Driver Not Loaded" in s.unavailable_reason

    def missing():
        raise ImportError("No module named 'pynvml'")

    monkeypatch.setattr(nvml_mod, "default_nvml", missing)
    s = GpuSampler()
    assert not s.available and "pip install nvidia-ml-py" in s.unavailable_reason
    empty = GpuSampler(nvml=fake_nvml_factory(devices=[]))
    assert not empty.available and "sees no GPU" in empty.unavailable_reason


def test_thread_fills_a_bounded_ring_and_shuts_nvml_down(fake_nvml):
    seen = []
    s = GpuSampler(interval=0.01, maxlen=5, on_sample=seen.append, nvml=fake_nvml)
    with s:
        deadline = time.monotonic() + 5
        while len(seen) < 16 and time.monotonic() < deadline:
            time.sleep(0.01)
    assert len(seen) >= 16
    kept = s.samples()
    assert len(kept) == 10  # 5 per GPU
    assert [x.timestamp_s for x in kept] == sorted(x.timestamp_s for x in kept)
    assert set(s.latest()) == {0, 1}
    assert len(s.history(0, 3)) == 3
    assert s.cpu_time_s() > 0
    assert fake_nvml.shutdown_count == 1


def test_a_failing_callback_is_kept_and_sampling_goes_on(fake_nvml, fake_clock):
    def boom(sample):
        raise OSError("No space left on device")

    s = GpuSampler(on_sample=boom, nvml=fake_nvml, clock=fake_clock)
    s.sample_once()
    s.sample_once()
    assert isinstance(s.last_error, OSError)
    assert len(s.samples()) == 4


def test_bad_arguments_are_value_errors():
    with pytest.raises(ValueError, match="interval must be > 0"):
        GpuSampler(interval=0)
    with pytest.raises(ValueError, match="maxlen"):
        GpuSampler(maxlen=0)


def test_pcie_off_is_recorded_as_a_reason(fake_nvml, fake_clock):
    s = GpuSampler(nvml=fake_nvml, clock=fake_clock, pcie=False)
    h200 = s.sample_once()[0]
    assert h200.pcie_rx_bytes_per_s is None
    assert h200.unavailable == {"pcie": "not sampled (pcie=False)"}


def test_one_hour_at_10hz_fits_in_50_mb(fake_nvml_factory, fake_device_factory, stable_commands):
    """Measure the ring buffer's bytes per sample with tracemalloc and extrapolate to 36000."""
    one_gpu = fake_nvml_factory(devices=[fake_device_factory("NVIDIA H200", procs=[(4242, 1 << 30)])])
    n = 3000
    s = GpuSampler(interval=0.1, maxlen=36000, nvml=one_gpu)
    s.sample_once()  # warm caches (names, reasons, commands) outside the measurement
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    for _ in range(n):
        s.sample_once()
    after = tracemalloc.get_traced_memory()[0]
    tracemalloc.stop()
    per_sample = (after - before) / n
    hour_bytes = per_sample * 36000
    assert len(s.samples()) == n + 1
    assert hour_bytes < 50e6, f"{per_sample:.0f} B/sample -> {hour_bytes / 1e6:.1f} MB an hour"


def test_a_transient_error_is_reported_for_that_sample_and_retried(fake_nvml, fake_clock):
    original = fake_nvml.nvmlDeviceGetTemperature
    failures = iter([True])

    def flaky(d, sensor):
        if d.name == "NVIDIA H200" and next(failures, False):
            raise fake_nvml.NVMLError("Unknown Error")
        return original(d, sensor)

    fake_nvml.nvmlDeviceGetTemperature = flaky
    s = GpuSampler(nvml=fake_nvml, clock=fake_clock)
    first, second = s.sample_once()[0], s.sample_once()[0]
    assert first.temperature_c is None
    assert first.unavailable == {"temperature": "NVMLError: Unknown Error"}
    assert second.temperature_c is not None and second.unavailable is None
