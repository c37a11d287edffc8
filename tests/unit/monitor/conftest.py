"""A fake NVML (pynvml-shaped) for CPU tests of the monitor, and fixtures around it.

Two devices: GPU 0 gives everything (H200-like, new clock-event API, ECC on, two processes);
GPU 1 raises ``NVMLError_NotSupported`` for power, PCIe and per-process memory, lacks the new
clock-event call (so the sampler falls back to the throttle-reasons call) and has ECC off.
Readings are a pure function of how many times the device was sampled, so output is exact.
Parity readings (nvidia-smi / nvitop): GPU 0 has a fan, P0, 18 NVLinks whose counters grow each
sample, MIG off and per-process SM %; GPU 1 has no fan, no NVLink, no MIG support, P8 and a busy
video encoder. ``mig_device()`` builds an A100 in MIG mode with two instances.
"""

from __future__ import annotations

import itertools
from types import SimpleNamespace

import pytest


class NVMLError(Exception):
    pass


class NVMLError_NotSupported(NVMLError):  # noqa: N801 - pynvml's name
    def __str__(self) -> str:
        return "Not Supported"


class NVMLError_LibraryNotFound(NVMLError):  # noqa: N801
    def __str__(self) -> str:
        return "NVML Shared Library Not Found"


class NVMLError_FunctionNotFound(NVMLError):  # noqa: N801
    pass


class NVMLError_NotFound(NVMLError):  # noqa: N801
    def __str__(self) -> str:
        return "Not Found"


class FakeMig:
    def __init__(self, uuid, gi, ci, used, total):
        self.uuid, self.gi, self.ci, self.used, self.total = uuid, gi, ci, used, total


class FakeDevice:
    def __init__(self, name, *, unsupported=(), new_reasons_api=True, ecc=True, procs=(), phase=0,
                 uuid="", bus="", fan=30, pstate=0, codec=(0, 0), nvlinks=18, mig=None,
                 nvlink_sum=True):
        self.name = name
        self.uuid, self.bus, self.fan, self.pstate = uuid, bus, fan, pstate
        self.codec, self.nvlinks, self.mig = codec, nvlinks, mig
        self.nvlink_sum = nvlink_sum  # False: an older driver that refuses the all-links sum
        self.phase = phase
        self.unsupported = set(unsupported)
        self.new_reasons_api = new_reasons_api
        self.ecc = ecc
        self.procs = list(procs)
        self.tick = 0

    def check(self, metric):
        if metric in self.unsupported:
            raise NVMLError_NotSupported()


class FakeNvml:
    """Module-like: the pynvml functions and constants the sampler uses."""

    NVMLError = NVMLError
    NVMLError_NotSupported = NVMLError_NotSupported
    NVMLError_LibraryNotFound = NVMLError_LibraryNotFound
    NVMLError_FunctionNotFound = NVMLError_FunctionNotFound
    NVML_TEMPERATURE_GPU = 0
    NVML_CLOCK_SM = 1
    NVML_CLOCK_MEM = 2
    NVML_PCIE_UTIL_TX_BYTES = 0
    NVML_PCIE_UTIL_RX_BYTES = 1
    NVML_FEATURE_ENABLED = 1
    NVML_MEMORY_ERROR_TYPE_UNCORRECTED = 1
    NVML_VOLATILE_ECC = 0
    NVML_DEVICE_MIG_ENABLE = 1
    NVMLError_NotFound = NVMLError_NotFound

    def __init__(self, devices=None, *, init_error=None):
        self.devices = devices if devices is not None else default_devices()
        self.init_error = init_error
        self.calls = itertools.count()
        self.init_count = 0
        self.shutdown_count = 0

    def nvmlInit(self):
        if self.init_error is not None:
            raise self.init_error
        self.init_count += 1

    def nvmlShutdown(self):
        self.shutdown_count += 1

    def nvmlDeviceGetCount(self):
        return len(self.devices)

    def nvmlDeviceGetHandleByIndex(self, i):
        return self.devices[i]

    def nvmlDeviceGetName(self, d):
        return d.name.encode()  # old pynvml returned bytes

    def nvmlDeviceGetUtilizationRates(self, d):
        d.tick += 1
        t = d.tick + d.phase
        return SimpleNamespace(gpu=(40 + 13 * t) % 101, memory=(20 + 7 * t) % 101)

    def nvmlDeviceGetMemoryInfo(self, d):
        if isinstance(d, FakeMig):
            return SimpleNamespace(total=d.total, used=d.used, free=d.total - d.used)
        total = 150_754_820_096 if d.ecc else 16_106_127_360
        used = 1_000_000_000 + (d.tick % 20) * 536_870_912 + 12345
        return SimpleNamespace(total=total, used=used, free=total - used)

    def nvmlDeviceGetTemperature(self, d, sensor):
        assert sensor == self.NVML_TEMPERATURE_GPU
        return 40 + d.tick % 7

    def nvmlDeviceGetPowerUsage(self, d):
        d.check("power")
        return 120_000 + 25_500 * (d.tick % 20)

    def nvmlDeviceGetEnforcedPowerLimit(self, d):
        d.check("power")
        return 700_000

    def nvmlDeviceGetClockInfo(self, d, which):
        return 1980 if which == self.NVML_CLOCK_SM else 2619

    def nvmlDeviceGetPcieThroughput(self, d, counter):
        d.check("pcie")
        return 1_500_000 if counter == self.NVML_PCIE_UTIL_RX_BYTES else 250_000

    def nvmlDeviceGetCurrentClocksEventReasons(self, d):
        if not d.new_reasons_api:
            raise NVMLError_FunctionNotFound()
        return 0x1 if d.tick == 1 else 0x4 | 0x20

    def nvmlDeviceGetCurrentClocksThrottleReasons(self, d):
        return 0x1 | 0x1000

    def nvmlDeviceGetEccMode(self, d):
        return (1, 1) if d.ecc else (0, 0)

    def nvmlDeviceGetTotalEccErrors(self, d, kind, counter):
        return 0

    def nvmlDeviceGetUUID(self, d):
        return d.uuid

    def nvmlDeviceGetPciInfo(self, d):
        return SimpleNamespace(busId=d.bus.encode())  # old pynvml returned bytes

    def nvmlDeviceGetFanSpeed(self, d):
        d.check("fan")
        return d.fan

    def nvmlDeviceGetPerformanceState(self, d):
        return d.pstate

    def nvmlDeviceGetEncoderUtilization(self, d):
        return [d.codec[0], 167000]

    def nvmlDeviceGetDecoderUtilization(self, d):
        return [d.codec[1], 167000]

    def nvmlDeviceGetFieldValues(self, d, fields):
        out = []
        for field, link in fields:
            links = range(d.nvlinks) if link == 0xFFFFFFFF else [link]  # UINT_MAX: every link
            if field == 91:
                value = d.nvlinks
            elif link == 0xFFFFFFFF and not d.nvlink_sum:
                out.append(SimpleNamespace(nvmlReturn=3, valueType=3,
                                           value=SimpleNamespace(ullVal=0)))
                continue
            else:
                value = sum({138: 1000 * d.tick * (j + 1), 139: 2000 * d.tick}[field] for j in links)
            out.append(SimpleNamespace(nvmlReturn=0, valueType=3, value=SimpleNamespace(ullVal=value)))
        return out

    def nvmlDeviceGetMigMode(self, d):
        d.check("mig")
        return (1, 1) if d.mig else (0, 0)

    def nvmlDeviceGetMaxMigDeviceCount(self, d):
        return 7

    def nvmlDeviceGetMigDeviceHandleByIndex(self, d, i):
        if i >= len(d.mig):
            raise NVMLError_NotFound()
        return d.mig[i]

    def nvmlDeviceGetGpuInstanceId(self, m):
        return m.gi

    def nvmlDeviceGetComputeInstanceId(self, m):
        return m.ci

    def nvmlDeviceGetProcessUtilization(self, d, since_us):
        d.check("processes")
        now_us = 1000 * d.tick
        if since_us >= now_us:
            raise NVMLError_NotFound()
        return [SimpleNamespace(pid=pid, timeStamp=now_us, smUtil=87 - 80 * n, memUtil=40,
                                encUtil=0, decUtil=0) for n, (pid, _) in enumerate(d.procs[:1])]

    def nvmlDeviceGetComputeRunningProcesses(self, d):
        d.check("processes")
        return [SimpleNamespace(pid=pid, usedGpuMemory=mem) for pid, mem in d.procs]


def default_devices():
    return [
        FakeDevice("NVIDIA H200", procs=[(4242, 42_949_672_960), (999_999_999, None)],
                   uuid="GPU-5e2b9d1a-0000-4000-8000-000000000000", bus="00000000:18:00.0"),
        FakeDevice(
            "Tesla T4",
            unsupported={"power", "pcie", "processes", "fan", "mig"},
            new_reasons_api=False,
            ecc=False,
            phase=5,
            uuid="GPU-77aa0c3e-0000-4000-8000-000000000001", bus="00000000:AF:00.0",
            pstate=8, codec=(12, 3), nvlinks=0,
        ),
    ]


def mig_device():
    """An A100 in MIG mode: two instances (1g.10gb with 2 GiB used, 3g.40gb idle)."""
    return FakeDevice(
        "NVIDIA A100-SXM4-80GB", uuid="GPU-a100", bus="00000000:07:00.0", nvlinks=12,
        mig=[FakeMig("MIG-1111", 1, 0, 2 << 30, 10 << 30), FakeMig("MIG-3333", 2, 0, 0, 40 << 30)],
    )


class FakeClock:
    """A wall clock that advances 0.1 s per reading, from a fixed epoch."""

    def __init__(self, start: float = 1_795_000_000.0, step: float = 0.1):
        self.t = start
        self.step = step

    def __call__(self) -> float:
        t = self.t
        self.t = round(self.t + self.step, 6)
        return t


@pytest.fixture
def fake_nvml():
    return FakeNvml()


@pytest.fixture
def fake_nvml_factory():
    return FakeNvml


@pytest.fixture
def fake_clock():
    return FakeClock()


@pytest.fixture
def fake_clock_factory():
    return FakeClock


@pytest.fixture
def stable_commands(monkeypatch):
    """Command lines for the fake pids without depending on the processes of this machine."""
    import gpudoctor.collectors.nvml_device as nvml_device

    commands = {4242: "python train.py --bf16"}
    monkeypatch.setattr(nvml_device, "command_for_pid", lambda pid: commands.get(pid, ""))
    return commands


@pytest.fixture
def fake_device_factory():
    return FakeDevice
