"""The readings nvidia-smi and nvitop users also look for, read once a second per GPU.

Command-line equivalents::

    nvidia-smi --query-gpu=uuid,pci.bus_id,fan.speed,pstate,utilization.encoder,\
utilization.decoder --format=csv
    nvidia-smi nvlink -gt d          # NVLink data counters (KiB)
    nvidia-smi -L                    # MIG devices under each GPU
    nvidia-smi pmon -s um            # per-process SM %
    ps -o rss -p PID                 # a GPU process's host memory

Each function reads through :meth:`gpudoctor.collectors.nvml_device.Device.read`, so a metric the
GPU or driver does not support is ``None`` with its reason in ``GpuSample.unavailable`` (the view
prints ``n/a``) and is not asked again; nothing here raises on an NVML error.
"""

from __future__ import annotations

from typing import Any

from gpudoctor.records.gpu import MigDevice

# NVML field ids (nvml.h); pynvml names them NVML_FI_DEV_NVLINK_*
FI_NVLINK_LINK_COUNT = 91
FI_NVLINK_DATA_TX_KIB = 138
FI_NVLINK_DATA_RX_KIB = 139
ALL_LINKS = 0xFFFFFFFF  # scopeId for the sum over every link (nvml.h: "a scopeId of UINT_MAX")
NVML_SUCCESS = 0
_NOT_FOUND = "NVMLError_NotFound"


def _call(dev: Any, metric: str, name: str, *args: Any) -> Any:
    """``dev.read(metric, nv.<name>, *args)``; a function this nvidia-ml-py lacks is n/a too."""
    fn = getattr(dev.nv, name, None)
    if fn is None:
        def fn(*_: Any) -> Any:
            raise AttributeError(f"nvidia-ml-py has no {name}")
    return dev.read(metric, fn, *args)


def identity(nv: Any, handle: Any) -> tuple[str, str]:
    """(UUID, PCI bus id) of a GPU, ``("", "")`` parts when NVML cannot say."""
    try:
        uuid = nv.nvmlDeviceGetUUID(handle)
        uuid = uuid.decode() if isinstance(uuid, bytes) else str(uuid)
    except Exception:
        uuid = ""
    try:
        bus = nv.nvmlDeviceGetPciInfo(handle).busId
        bus = bus.decode() if isinstance(bus, bytes) else str(bus)
    except Exception:
        bus = ""
    return uuid, bus


def normalise_bus_id(text: str) -> str:
    """``07:00.0`` / ``0000:07:00.0`` / ``00000000:07:00.0`` -> ``00000000:07:00.0`` (lower case)."""
    parts = text.strip().lower().split(":")
    if len(parts) == 2:
        parts.insert(0, "0")
    if len(parts) != 3:
        return text.strip().lower()
    domain, bus, rest = parts
    return f"{int(domain, 16):08x}:{bus.zfill(2)}:{rest}" if all(
        c in "0123456789abcdef" for c in domain) and domain else text.strip().lower()


def fan_speed(dev: Any) -> float | None:
    """Fan speed in % of its maximum (``fan.speed``); passively cooled boards: n/a."""
    v = _call(dev, "fan", "nvmlDeviceGetFanSpeed", dev.handle)
    return None if v is None else float(v)


def pstate(dev: Any) -> int | None:
    """Performance state 0 (P0, most performance) to 15; NVML's 32 (unknown) is ``None``."""
    v = _call(dev, "pstate", "nvmlDeviceGetPerformanceState", dev.handle)
    return None if v is None or not 0 <= int(v) <= 15 else int(v)


def codec_util(dev: Any) -> tuple[float | None, float | None]:
    """(encoder %, decoder %) over NVML's sampling period."""
    enc = _call(dev, "encoder", "nvmlDeviceGetEncoderUtilization", dev.handle)
    dec = _call(dev, "decoder", "nvmlDeviceGetDecoderUtilization", dev.handle)
    return (None if enc is None else float(enc[0]), None if dec is None else float(dec[0]))


# nvmlValueType_t -> the member of the nvmlValue_t union that holds the value
_VALUE_MEMBER = {0: "dVal", 1: "uiVal", 2: "ulVal", 3: "ullVal", 4: "sllVal", 5: "siVal",
                 6: "usVal"}


def _field_values(nv: Any, h: Any, fields: list[tuple[int, int]]) -> list[int | None]:
    """Integer values of NVML fields ((field id, scope id) pairs); ``None`` for a field the
    driver answered with an error."""
    values = nv.nvmlDeviceGetFieldValues(h, fields)  # AttributeError when absent: n/a
    out: list[int | None] = []
    for v in values:
        if int(getattr(v, "nvmlReturn", NVML_SUCCESS)) != NVML_SUCCESS:
            out.append(None)
        else:
            member = _VALUE_MEMBER.get(int(getattr(v, "valueType", 3)), "ullVal")
            out.append(int(getattr(v.value, member)))
    return out


def nvlink_bytes(dev: Any) -> tuple[int | None, int | None]:
    """(rx, tx) data bytes over every NVLink of the GPU since the driver loaded.

    The link count is read once; a GPU with no NVLink (a PCIe card) is n/a ("no NVLink"). The
    counters are asked for summed over every link (scope ``UINT_MAX``); a driver that refuses the
    sum is asked link by link from then on.
    """
    nv, h = dev.nv, dev.handle
    if dev.nvlinks is None:
        got = dev.read("nvlink", _field_values, nv, h, [(FI_NVLINK_LINK_COUNT, 0)])
        if got is None:
            return None, None
        if got[0] is None:
            _give_up(dev, "the driver does not give the NVLink count")
            return None, None
        dev.nvlinks = got[0]
        if not dev.nvlinks:
            _give_up(dev, "no NVLink on this GPU")
    if not dev.nvlinks:
        return None, None
    links = [ALL_LINKS] if dev.nvlink_sum is not False else list(range(dev.nvlinks))
    fields = [(f, link) for link in links for f in (FI_NVLINK_DATA_RX_KIB, FI_NVLINK_DATA_TX_KIB)]
    got = dev.read("nvlink", _field_values, nv, h, fields)
    if got is None:
        return None, None
    if any(v is None for v in got):
        if dev.nvlink_sum is None:  # an older driver without the all-links sum: ask per link
            dev.nvlink_sum = False
            return nvlink_bytes(dev)
        _give_up(dev, "the driver does not give NVLink data counters")
        return None, None
    dev.nvlink_sum = links == [ALL_LINKS]
    return sum(got[0::2]) * 1024, sum(got[1::2]) * 1024


def _give_up(dev: Any, reason: str) -> None:
    dev.unavailable = {**(dev.unavailable or {}), "nvlink": reason}


def mig_devices(dev: Any) -> tuple[MigDevice, ...]:
    """The MIG instances of a GPU in MIG mode (empty when MIG is off or not supported)."""
    nv, h = dev.nv, dev.handle
    mode = _call(dev, "mig", "nvmlDeviceGetMigMode", h)
    if mode is None or int(mode[0]) != getattr(nv, "NVML_DEVICE_MIG_ENABLE", 1):
        return ()
    count = _call(dev, "mig", "nvmlDeviceGetMaxMigDeviceCount", h) or 0
    out = []
    for i in range(int(count)):
        try:
            m = nv.nvmlDeviceGetMigDeviceHandleByIndex(h, i)
        except Exception:  # an empty slot raises NotFound; anything else: skip that slot
            continue
        uuid, _ = identity(nv, m)
        out.append(MigDevice(
            uuid=uuid,
            gpu_instance_id=_maybe_int(nv.nvmlDeviceGetGpuInstanceId, m),
            compute_instance_id=_maybe_int(nv.nvmlDeviceGetComputeInstanceId, m),
            mem_used_bytes=_mem(nv, m, "used"), mem_total_bytes=_mem(nv, m, "total"),
        ))
    return tuple(out)


def _maybe_int(fn: Any, *args: Any) -> int | None:
    try:
        return int(fn(*args))
    except Exception:
        return None


def _mem(nv: Any, handle: Any, what: str) -> int | None:
    try:
        return int(getattr(nv.nvmlDeviceGetMemoryInfo(handle), what))
    except Exception:
        return None


def process_sm_util(dev: Any) -> dict[int, float]:
    """pid -> SM % of its newest NVML sample since the last read (``nvidia-smi pmon``'s sm).

    NVML keeps a short buffer of per-process samples; asking from the last timestamp seen gives
    the new ones. No new sample (``NotFound``) means no process ran a kernel since: an empty dict.
    """
    nv, h = dev.nv, dev.handle
    if dev.unavailable is not None and "process_sm" in dev.unavailable:
        return {}
    try:
        samples = getattr(nv, "nvmlDeviceGetProcessUtilization")(h, dev.util_seen_us)
    except Exception as exc:
        if _NOT_FOUND in type(exc).__name__:
            return {}
        dev.read("process_sm", _raise, exc)  # keeps the reason, permanent or for this sample
        return {}
    newest: dict[int, tuple[int, float]] = {}
    for s in samples:
        ts = int(s.timeStamp)
        if ts >= newest.get(int(s.pid), (-1, 0.0))[0]:
            newest[int(s.pid)] = (ts, float(s.smUtil))
        dev.util_seen_us = max(dev.util_seen_us, ts)
    return {pid: util for pid, (_, util) in newest.items()}


def _raise(exc: BaseException) -> None:
    raise exc


def host_rss(pid: int, handles: dict[int, Any]) -> int | None:
    """Resident host memory of a process; ``None`` when it is gone or not visible from here.

    ``handles``: pid -> ``psutil.Process`` (or ``None`` for a pid not visible from here, e.g.
    a host pid seen from a container), kept by the caller while the pid stays on the GPU, so a
    process is looked up once and a pid that cannot be read is not asked about every second.
    """
    import psutil

    if pid not in handles:
        try:
            handles[pid] = psutil.Process(pid)
        except (psutil.Error, OSError):
            handles[pid] = None
    proc = handles[pid]
    if proc is None:
        return None
    try:
        return int(proc.memory_info().rss)
    except (psutil.Error, OSError):
        handles[pid] = None
        return None


__all__ = [
    "codec_util", "fan_speed", "host_rss", "identity", "mig_devices", "normalise_bus_id",
    "nvlink_bytes", "process_sm_util", "pstate",
]
