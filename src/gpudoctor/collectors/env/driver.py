"""The NVIDIA driver: version, highest CUDA version, GPUs and who holds their memory.

Read through NVML (nvidia-ml-py) first; when NVML cannot be loaded, parse ``nvidia-smi``:
``nvidia-smi --query-gpu=index,name,uuid,memory.total,memory.used,driver_version
--format=csv,noheader,nounits`` and the ``CUDA Version:`` field of its banner. Neither answering
is a fact (``source="none"`` with both errors), never an exception.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

from gpudoctor.records.env import DriverFacts, GpuInfo, GpuMemoryUser
from gpudoctor.records.units import MIB

SMI_QUERY = "index,name,uuid,memory.total,memory.used,driver_version"
_PCI_ROOT = Path("/sys/bus/pci/devices")


def read_driver(*, exclude_pids: frozenset[int] = frozenset()) -> DriverFacts:
    """Driver facts from NVML, else ``nvidia-smi``, else ``source="none"`` with the reasons."""
    pci = count_pci_nvidia_gpus(_PCI_ROOT)
    facts, nvml_error = _from_nvml(exclude_pids)
    if facts is not None:
        return _with_pci(facts, pci)
    facts, smi_error = _from_nvidia_smi()
    if facts is not None:
        return _with_pci(facts, pci)
    return DriverFacts(source="none", error=f"NVML: {nvml_error}; nvidia-smi: {smi_error}",
                       pci_nvidia_gpus=pci)


def _with_pci(facts: DriverFacts, pci: int | None) -> DriverFacts:
    return DriverFacts(**{**{f: getattr(facts, f) for f in facts.__slots__}, "pci_nvidia_gpus": pci})


def _from_nvml(exclude_pids: frozenset[int]) -> tuple[DriverFacts | None, str]:
    try:
        import pynvml
    except ImportError:
        return None, "nvidia-ml-py is not installed (pip install nvidia-ml-py)"
    try:
        pynvml.nvmlInit()
    except Exception as exc:  # NVMLError_LibraryNotFound, DriverNotLoaded, version mismatch...
        return None, _nvml_words(exc)
    try:
        version = _text(pynvml.nvmlSystemGetDriverVersion())
        cuda = pynvml.nvmlSystemGetCudaDriverVersion()  # e.g. 13000 for 13.0
        gpus, users = [], []
        for index in range(pynvml.nvmlDeviceGetCount()):
            handle = pynvml.nvmlDeviceGetHandleByIndex(index)
            mem = pynvml.nvmlDeviceGetMemoryInfo(handle)
            gpus.append(GpuInfo(index=index, name=_text(pynvml.nvmlDeviceGetName(handle)),
                                uuid=_text(pynvml.nvmlDeviceGetUUID(handle)),
                                memory_total_bytes=int(mem.total), memory_used_bytes=int(mem.used)))
            try:
                procs = pynvml.nvmlDeviceGetComputeRunningProcesses(handle)
            except Exception:  # not supported on this GPU / driver: no list rather than a crash
                procs = []
            for proc in procs:
                if proc.pid in exclude_pids:
                    continue
                used = getattr(proc, "usedGpuMemory", None)
                users.append(GpuMemoryUser(gpu_index=index, pid=int(proc.pid),
                                           used_bytes=int(used) if used else None,
                                           process_name=_process_name(proc.pid)))
        return DriverFacts(source="nvml", version=version,
                           cuda_version=f"{cuda // 1000}.{cuda % 1000 // 10}",
                           gpus=tuple(gpus), memory_users=tuple(users)), ""
    except Exception as exc:
        return None, _nvml_words(exc)
    finally:
        try:
            pynvml.nvmlShutdown()
        except Exception:
            pass


def _from_nvidia_smi() -> tuple[DriverFacts | None, str]:
    exe = shutil.which("nvidia-smi")
    if exe is None:
        return None, "nvidia-smi not found on PATH"
    try:
        query = subprocess.run([exe, f"--query-gpu={SMI_QUERY}", "--format=csv,noheader,nounits"],
                               capture_output=True, text=True, timeout=15)
        banner = subprocess.run([exe], capture_output=True, text=True, timeout=15)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return None, f"nvidia-smi did not answer ({exc})"
    if query.returncode != 0:
        said = (query.stdout + query.stderr).strip().splitlines()
        return None, said[0] if said else f"nvidia-smi exited with {query.returncode}"
    gpus, version = parse_smi_query(query.stdout)
    return DriverFacts(source="nvidia-smi", version=version,
                       cuda_version=parse_smi_cuda_version(banner.stdout), gpus=gpus), ""


def parse_smi_query(text: str) -> tuple[tuple[GpuInfo, ...], str | None]:
    """Parse ``nvidia-smi --query-gpu=<SMI_QUERY> --format=csv,noheader,nounits`` output."""
    gpus, version = [], None
    for line in text.strip().splitlines():
        cells = [c.strip() for c in line.split(",")]
        if len(cells) != 6 or not cells[0].isdigit():
            continue
        gpus.append(GpuInfo(index=int(cells[0]), name=cells[1], uuid=cells[2],
                            memory_total_bytes=_mib(cells[3]), memory_used_bytes=_mib(cells[4])))
        version = cells[5]
    return tuple(gpus), version


def parse_smi_cuda_version(banner: str) -> str | None:
    """The ``CUDA Version: 12.4`` field of the plain ``nvidia-smi`` banner."""
    match = re.search(r"CUDA Version:\s*([0-9]+\.[0-9]+)", banner)
    return match.group(1) if match else None


def count_pci_nvidia_gpus(root: Path) -> int | None:
    """NVIDIA (vendor 0x10de) display or 3D controllers (class 0x03xxxx) under ``root``."""
    try:
        count = 0
        for dev in root.iterdir():
            vendor = (dev / "vendor").read_text().strip()
            klass = (dev / "class").read_text().strip()
            count += vendor == "0x10de" and klass.startswith("0x03")
        return count
    except OSError:
        return None


def _mib(cell: str) -> int | None:
    try:
        return int(float(cell) * MIB)
    except ValueError:  # "[N/A]"
        return None


def _text(value: object) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _nvml_words(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}".strip()


def _process_name(pid: int) -> str:
    try:
        import psutil

        return psutil.Process(pid).name()
    except Exception:  # another PID namespace (containers) or already gone
        return ""
