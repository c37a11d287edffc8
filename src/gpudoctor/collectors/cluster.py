"""What one rank of ``gpudoctor check --cluster`` observes about its node.

The environment is read with the same probes as ``gpudoctor check`` (driver through NVML, host
facts, torch's build facts, read in this process since it already runs torch for the process
group) and frozen exactly as ``check --freeze`` freezes it; on top, GPU clocks and power limits
(NVML), the network interfaces (psutil), the InfiniBand/RoCE adapters and their ports' state and
rate (sysfs), and a TCP connection to the rendezvous store with a timeout. Nothing here raises
for a missing fact: it is recorded.
"""

from __future__ import annotations

import os
import re
import socket
import time
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path

from gpudoctor.analysis.env_diff import NOT_FROZEN_ENV, freeze
from gpudoctor.collectors.env.driver import read_driver
from gpudoctor.collectors.env.host import read_host
from gpudoctor.records.cluster import GpuClocks, IbPort, NetInterface, RankEnv, StoreProbe
from gpudoctor.records.env import EnvFacts, ProbeRun

# Beyond what `check` records: every CUDA_* variable (CUDA_DEVICE_MAX_CONNECTIONS, ...) and gloo's
# interface choice; per-process ones (CUDA_VISIBLE_DEVICES, RANK, ...) stay out, as in --freeze.
EXTRA_PREFIXES = ("CUDA_", "GLOO_")
IB_ROOT = Path("/sys/class/infiniband")


def probe_store(addr: str, port: str, timeout_s: float) -> StoreProbe:
    """Open (and close) a TCP connection to the store; the error in words when it fails.

    A refused connection is retried until ``timeout_s`` (the store's host may still be starting:
    outside torchrun, rank 0 opens the store inside ``init_process_group``).
    """
    try:
        port_number = int(port)
    except ValueError:
        return StoreProbe(addr=addr, port=port, ok=False, timeout_s=timeout_s,
                          error=f"MASTER_PORT={port!r} is not a port number")
    start = time.perf_counter()
    deadline = start + timeout_s
    try:
        while True:
            try:
                with socket.create_connection((addr, port_number),
                                              timeout=max(0.1, deadline - time.perf_counter())):
                    break
            except ConnectionRefusedError:
                if time.perf_counter() + 0.5 > deadline:
                    raise
                time.sleep(0.5)
    except socket.gaierror as exc:
        return StoreProbe(addr=addr, port=port, ok=False, timeout_s=timeout_s,
                          error=f"MASTER_ADDR {addr!r} does not resolve here ({exc.strerror or exc})")
    except TimeoutError:
        return StoreProbe(addr=addr, port=port, ok=False, timeout_s=timeout_s,
                          error=f"no answer within {timeout_s:g} s (a firewall dropping the port, or "
                                "the wrong address)")
    except OSError as exc:
        return StoreProbe(addr=addr, port=port, ok=False, timeout_s=timeout_s,
                          error=f"{exc.strerror or exc} for {timeout_s:g} s (nothing listens there: "
                                "node 0 not started, or another port)")
    return StoreProbe(addr=addr, port=port, ok=True, timeout_s=timeout_s,
                      ms=(time.perf_counter() - start) * 1000.0)


def read_interfaces() -> tuple[NetInterface, ...]:
    """Every interface with its IP addresses, state and link speed (psutil)."""
    import psutil

    addrs = psutil.net_if_addrs()
    stats = psutil.net_if_stats()
    families = (socket.AF_INET, socket.AF_INET6)
    out = []
    for name in sorted(addrs):
        st = stats.get(name)
        out.append(NetInterface(name=name,
                                addresses=tuple(a.address for a in addrs[name] if a.family in families),
                                up=st.isup if st else None, speed_mbps=st.speed if st else None))
    return tuple(out)


def read_ib_devices(root: Path = IB_ROOT) -> tuple[str, ...]:
    """The InfiniBand/RoCE adapters (``mlx5_0``, ...) the kernel lists."""
    try:
        return tuple(sorted(p.name for p in root.iterdir()))
    except OSError:
        return ()


def read_ib_ports(root: Path = IB_ROOT) -> tuple[IbPort, ...]:
    """Every adapter port: its state, rate and link layer (sysfs, as ``ibstat`` reads them)."""
    out = []
    for device in read_ib_devices(root):
        try:
            ports = sorted((root / device / "ports").iterdir(), key=lambda p: p.name)
        except OSError:
            continue
        for port in ports:
            if not port.name.isdigit():
                continue
            state = _sysfs(port / "state")  # "4: ACTIVE"
            rate = re.match(r"\s*([\d.]+)\s*Gb/sec", _sysfs(port / "rate"))
            out.append(IbPort(device=device, port=int(port.name), state=state.split(":")[-1].strip(),
                              rate_gbps=float(rate.group(1)) if rate else None,
                              link_layer=_sysfs(port / "link_layer")))
    return tuple(out)


def _sysfs(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8", errors="replace").strip()
    except OSError:
        return ""


def read_clocks() -> tuple[tuple[GpuClocks, ...], str]:
    """Per GPU: SM application and max clocks, memory max clock, enforced power limit (NVML)."""
    try:
        import pynvml

        pynvml.nvmlInit()
    except Exception as exc:  # no NVML library, no driver: a CPU machine
        return (), f"NVML: {type(exc).__name__}"
    out = []
    try:
        for index in range(pynvml.nvmlDeviceGetCount()):
            h = pynvml.nvmlDeviceGetHandleByIndex(index)
            name = pynvml.nvmlDeviceGetName(h)
            out.append(GpuClocks(
                index=index, name=name.decode() if isinstance(name, bytes) else str(name),
                sm_max_mhz=_nvml(pynvml.nvmlDeviceGetMaxClockInfo, h, pynvml.NVML_CLOCK_SM),
                sm_app_mhz=_nvml(pynvml.nvmlDeviceGetApplicationsClock, h, pynvml.NVML_CLOCK_SM),
                mem_max_mhz=_nvml(pynvml.nvmlDeviceGetMaxClockInfo, h, pynvml.NVML_CLOCK_MEM),
                power_limit_w=_watts(_nvml(pynvml.nvmlDeviceGetEnforcedPowerLimit, h))))
    except Exception as exc:
        return tuple(out), f"NVML: {exc}"
    finally:
        try:
            pynvml.nvmlShutdown()
        except Exception:
            pass
    return tuple(out), ""


def _nvml(fn, *args) -> int | None:
    try:
        return int(fn(*args))
    except Exception:  # not supported on this GPU / in this VM
        return None


def _watts(milliwatts: int | None) -> float | None:
    return None if milliwatts is None else milliwatts / 1000.0


def _extra_env(environ: Mapping[str, str]) -> dict[str, str]:
    return {k: v for k, v in environ.items() if k.startswith(EXTRA_PREFIXES) and k not in NOT_FROZEN_ENV}


def rank_env(*, rank: int, local_rank: int, environ: Mapping[str, str] | None = None,
             store: StoreProbe | None = None) -> RankEnv:
    """This rank's record: the frozen environment (as ``--freeze``) plus clocks and network."""
    import torch

    from gpudoctor.collectors.env.probe import torch_facts

    environ = os.environ if environ is None else environ
    facts = EnvFacts(driver=read_driver(), host=read_host(dict(environ)),
                     probe=ProbeRun(status="not_run"), torch=torch_facts(torch))
    frozen = freeze(facts)
    frozen = replace(frozen, env=dict(sorted({**frozen.env, **_extra_env(environ)}.items())))
    clocks, clocks_error = read_clocks()
    return RankEnv(rank=rank, local_rank=local_rank, node=int(environ.get("GROUP_RANK", "0") or 0),
                   hostname=socket.gethostname(), frozen=frozen, clocks=clocks,
                   clocks_error=clocks_error, interfaces=read_interfaces(),
                   ib_devices=read_ib_devices(), ib_ports=read_ib_ports(), store=store)
