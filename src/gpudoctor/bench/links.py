"""Link and power evidence for the benchmark figures: PCIe generation/width, NVLink, P2P access,
power cap, clocks and throttle reasons — the usual explanations of a low figure.

Command-line equivalents: ``nvidia-smi -q -d PCIE,POWER,CLOCK,PERFORMANCE``, ``nvidia-smi nvlink -s``
and ``nvidia-smi topo -m``. NVML is optional: without it (no driver, no ``pynvml``) every NVML
field is ``None`` with the reason, and only torch's P2P answer is filled in.
"""

from __future__ import annotations

import os

from gpudoctor.records.bench import LinkState
from gpudoctor.records.gpu_specs import pcie_gbs  # re-exported: the link figures quote it

# Clock event ("throttle") reason bits of nvmlDeviceGetCurrentClocksEventReasons.
_THROTTLE_BITS = {
    0x4: "sw_power_cap",
    0x8: "hw_slowdown",
    0x20: "sw_thermal",
    0x40: "hw_thermal",
    0x80: "hw_power_brake",
    0x2: "applications_clocks_setting",
    0x10: "sync_boost",
}


def nvlink_gbs(active_links: int | None, capability: tuple[int, int] | None) -> float | None:
    """NVLink bandwidth of one GPU, one direction, GB/s: active links x per-link rate.

    Per-link rate per direction: 20 GB/s on Pascal (NVLink 1), 25 GB/s on Volta, Ampere and
    Hopper (NVLink 2-4: H100/H200 = 18 x 25 = 450), 50 GB/s from Blackwell (NVLink 5). Chosen
    by compute capability, since NVML's version numbering has changed between releases.
    """
    if not active_links or capability is None:
        return None
    if capability[0] >= 10:
        per_link = 50.0
    elif capability == (6, 0):
        per_link = 20.0
    else:
        per_link = 25.0
    return active_links * per_link


def nccl_env(environ: dict[str, str] | None = None) -> dict[str, str]:
    """The ``NCCL_*`` variables and ``CUDA_VISIBLE_DEVICES`` that shape collective bandwidth."""
    env = os.environ if environ is None else environ
    keys = sorted(k for k in env if k.startswith("NCCL_") or k == "CUDA_VISIBLE_DEVICES")
    return {k: env[k] for k in keys}


def _nvml_handle(pynvml, index: int):
    """NVML handle of CUDA device ``index`` (by UUID: NVML and CUDA may number GPUs differently)."""
    import torch

    try:
        uuid = str(torch.cuda.get_device_properties(index).uuid)
        return pynvml.nvmlDeviceGetHandleByUUID(uuid if uuid.startswith("GPU-") else f"GPU-{uuid}")
    except Exception:
        return pynvml.nvmlDeviceGetHandleByIndex(index)


def _read(fields: dict, unavailable: dict[str, str], name: str, fn) -> None:
    try:
        fields[name] = fn()
    except Exception as exc:  # NVML raises per-field NotSupported / NoPermission: keep the rest
        unavailable[name] = type(exc).__name__


def probe_link(index: int) -> LinkState:
    """Read the link and power state of CUDA device ``index`` (initialises CUDA, not a sync)."""
    import torch

    props = torch.cuda.get_device_properties(index)
    fields: dict = {}
    unavailable: dict[str, str] = {}
    count = torch.cuda.device_count()
    fields["p2p_peers"] = tuple(
        j for j in range(count) if j != index and torch.cuda.can_device_access_peer(index, j)
    )
    try:
        import pynvml

        pynvml.nvmlInit()
    except Exception as exc:
        reason = f"NVML unavailable ({type(exc).__name__})"
        for name in ("pcie", "nvlink", "power", "clocks", "throttle_reasons"):
            unavailable[name] = reason
        return LinkState(index=index, name=props.name, unavailable=unavailable, **fields)
    try:
        handle = _nvml_handle(pynvml, index)
        _read(fields, unavailable, "pcie_gen_current", lambda: pynvml.nvmlDeviceGetCurrPcieLinkGeneration(handle))
        _read(fields, unavailable, "pcie_width_current", lambda: pynvml.nvmlDeviceGetCurrPcieLinkWidth(handle))
        _read(fields, unavailable, "pcie_gen_max", lambda: pynvml.nvmlDeviceGetMaxPcieLinkGeneration(handle))
        _read(fields, unavailable, "pcie_width_max", lambda: pynvml.nvmlDeviceGetMaxPcieLinkWidth(handle))
        _read(fields, unavailable, "power_limit_w", lambda: pynvml.nvmlDeviceGetPowerManagementLimit(handle) / 1000.0)
        _read(
            fields, unavailable, "default_power_limit_w",
            lambda: pynvml.nvmlDeviceGetPowerManagementDefaultLimit(handle) / 1000.0,
        )
        _read(fields, unavailable, "sm_clock_mhz", lambda: pynvml.nvmlDeviceGetClockInfo(handle, pynvml.NVML_CLOCK_SM))
        _read(
            fields, unavailable, "max_sm_clock_mhz",
            lambda: pynvml.nvmlDeviceGetMaxClockInfo(handle, pynvml.NVML_CLOCK_SM),
        )
        _read(fields, unavailable, "throttle_reasons", lambda: _throttle(pynvml, handle))
        _read(fields, unavailable, "nvlink_active_links", lambda: _nvlinks(pynvml, handle, fields))
    finally:
        pynvml.nvmlShutdown()
    return LinkState(
        index=index, name=props.name, unavailable=unavailable or None, **fields
    )


def _throttle(pynvml, handle) -> tuple[str, ...]:
    getter = getattr(pynvml, "nvmlDeviceGetCurrentClocksEventReasons", None) or (
        pynvml.nvmlDeviceGetCurrentClocksThrottleReasons
    )
    mask = int(getter(handle))
    return tuple(name for bit, name in _THROTTLE_BITS.items() if mask & bit)


def _nvlinks(pynvml, handle, fields: dict) -> int:
    """Count active NVLinks; links a GPU does not have raise, and are skipped."""
    active = 0
    for link in range(getattr(pynvml, "NVML_NVLINK_MAX_LINKS", 18)):
        try:
            if pynvml.nvmlDeviceGetNvLinkState(handle, link) == pynvml.NVML_FEATURE_ENABLED:
                active += 1
                if "nvlink_version" not in fields:
                    fields["nvlink_version"] = int(pynvml.nvmlDeviceGetNvLinkVersion(handle, link))
        except Exception:
            continue
    return active


def probe_links(count: int) -> tuple[LinkState, ...]:
    """:func:`probe_link` for CUDA devices ``0..count-1``; a failing probe gives a bare record."""
    states = []
    for index in range(count):
        try:
            states.append(probe_link(index))
        except Exception as exc:
            states.append(LinkState(index=index, unavailable={"probe": f"{type(exc).__name__}: {exc}"}))
    return tuple(states)
