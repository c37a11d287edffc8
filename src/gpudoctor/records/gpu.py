"""GPU and host samples, as the NVML and psutil samplers produce them.

A metric the device cannot give is ``None``; the reason is kept once per GPU in
``GpuSample.unavailable`` (metric name -> reason), so a sample never lies with a zero.
"""

from __future__ import annotations

from gpudoctor.records.base import record


@record
class GpuProcess:
    """A process holding memory on a GPU (``nvidia-smi --query-compute-apps=pid,used_memory``)."""

    pid: int
    used_memory_bytes: int | None
    command: str = ""
    sm_util_pct: float | None = None  # nvidia-smi pmon's "sm" (nvmlDeviceGetProcessUtilization)
    host_rss_bytes: int | None = None  # the process's resident host memory (psutil)


@record
class MigDevice:
    """One MIG instance of a GPU (``nvidia-smi -L`` lists them under the GPU)."""

    uuid: str
    gpu_instance_id: int | None = None
    compute_instance_id: int | None = None
    mem_used_bytes: int | None = None
    mem_total_bytes: int | None = None


@record
class GpuSample:
    """One reading of one GPU at one moment.

    Columns follow ``nvidia-smi --query-gpu=timestamp,name,utilization.gpu,utilization.memory,
    memory.total,memory.used,memory.free,temperature.gpu,power.draw`` first, then the rest.
    """

    timestamp_s: float
    index: int
    name: str
    util_gpu_pct: float | None = None
    util_mem_pct: float | None = None
    mem_total_bytes: int | None = None
    mem_used_bytes: int | None = None
    mem_free_bytes: int | None = None
    temperature_c: float | None = None
    power_w: float | None = None
    power_limit_w: float | None = None
    sm_clock_mhz: int | None = None
    mem_clock_mhz: int | None = None
    pcie_rx_bytes_per_s: float | None = None
    pcie_tx_bytes_per_s: float | None = None
    throttle_reasons: tuple[str, ...] = ()
    ecc_errors_uncorrected: int | None = None
    processes: tuple[GpuProcess, ...] = ()
    unavailable: dict[str, str] | None = None
    uuid: str = ""
    pci_bus_id: str = ""  # "00000000:07:00.0", as nvidia-smi's pci.bus_id
    fan_speed_pct: float | None = None
    pstate: int | None = None  # 0 for P0 (most performance) to 15
    encoder_util_pct: float | None = None
    decoder_util_pct: float | None = None
    nvlink_rx_bytes: int | None = None  # data received over every NVLink since the driver loaded
    nvlink_tx_bytes: int | None = None
    mig_devices: tuple[MigDevice, ...] = ()


@record
class HostSample:
    """One reading of the host: CPU, memory, and the process tree of the watched job."""

    timestamp_s: float
    cpu_pct: float | None = None
    busiest_core_pct: float | None = None
    ram_used_bytes: int | None = None
    ram_total_bytes: int | None = None
    tree_cpu_pct: float | None = None
    tree_rss_bytes: int | None = None
    tree_pids: tuple[int, ...] = ()
