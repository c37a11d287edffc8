"""The CPU-side monitor benchmark (benchmarks/monitor_overhead_cpu.py) runs and counts NVML calls."""

from __future__ import annotations

import importlib.util
from pathlib import Path

from gpudoctor.collectors.nvml import GpuSampler

BENCH = Path(__file__).resolve().parents[3] / "benchmarks" / "monitor_overhead_cpu.py"


def _bench():
    spec = importlib.util.spec_from_file_location("monitor_overhead_cpu", BENCH)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_per_sample_counts_the_nvml_calls_of_a_10hz_stream():
    bench = _bench()
    fake = bench._fake_module()
    result = bench.per_sample(fake, GpuSampler, interval=0.1, samples=100)
    calls = result["nvml_calls_per_sample_by_name"]
    # every sample: utilization, memory, temperature, power, 2 clocks, clock-event reasons
    for name in ("nvmlDeviceGetUtilizationRates", "nvmlDeviceGetMemoryInfo",
                 "nvmlDeviceGetTemperature", "nvmlDeviceGetPowerUsage",
                 "nvmlDeviceGetCurrentClocksEventReasons"):
        assert calls[name] == 1.0, name
    assert calls["nvmlDeviceGetClockInfo"] == 2.0
    # once a second at 10 Hz: the process list and the two PCIe counters; every 5 s: the rest
    assert calls["nvmlDeviceGetComputeRunningProcesses"] == 0.1
    assert result["pcie_reads_per_sample"] == 0.2
    assert calls["nvmlDeviceGetEnforcedPowerLimit"] == 0.02
    # once a second too: the nvidia-smi/nvitop parity readings (fan, P-state, encoder, decoder,
    # NVLink counters, MIG mode, per-process SM %)
    for name in ("nvmlDeviceGetFanSpeed", "nvmlDeviceGetPerformanceState",
                 "nvmlDeviceGetEncoderUtilization", "nvmlDeviceGetDecoderUtilization",
                 "nvmlDeviceGetFieldValues", "nvmlDeviceGetMigMode",
                 "nvmlDeviceGetProcessUtilization"):
        assert calls[name] == 0.1, name
    # 7.35 before those seven calls a second were added; 19 if everything were read every sample
    assert result["nvml_calls_per_sample"] < 8.1
    assert result["cpu_us_per_sample"] > 0
