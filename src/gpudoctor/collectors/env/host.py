"""Host facts: CPUs, RAM (and a container's cgroup limit), ``/dev/shm``, ``/dev/nvidia*``
permissions, the environment variables that change GPU behaviour, and installed packages.

Nothing here imports torch: package versions come from ``importlib.metadata`` (what
``pip list`` reads), so this runs while the torch probe subprocess is still starting.
"""

from __future__ import annotations

import glob
import importlib.metadata as metadata
import os
import platform
import re
import stat
import sys
from pathlib import Path

from gpudoctor.records.env import DeviceNode, HostFacts

# Environment variables that change which GPUs are seen, how CUDA/NCCL behave, or numerics.
ENV_NAMES = (
    "CUDA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER", "NVIDIA_VISIBLE_DEVICES", "CUDA_LAUNCH_BLOCKING",
    "CUDA_MODULE_LOADING", "PYTORCH_CUDA_ALLOC_CONF", "PYTORCH_ALLOC_CONF", "CUBLAS_WORKSPACE_CONFIG",
    "NVIDIA_TF32_OVERRIDE", "TORCH_ALLOW_TF32_CUBLAS_OVERRIDE", "OMP_NUM_THREADS",
    "RANK", "LOCAL_RANK", "WORLD_SIZE", "NODE_RANK", "MASTER_ADDR", "MASTER_PORT", "LD_LIBRARY_PATH",
)
ENV_PREFIXES = ("NCCL_", "TORCH_NCCL_")
# Packages whose exact version matters for results or speed (plus every ``nvidia-*`` wheel).
PACKAGES = (
    "torch", "torchvision", "torchaudio", "triton", "numpy", "gpudoctor", "lightning",
    "pytorch-lightning", "accelerate", "transformers", "deepspeed", "flash-attn", "xformers",
    "apex", "timm", "nvidia-ml-py", "pillow", "pillow-simd",
)


def read_host(environ: dict[str, str] | None = None) -> HostFacts:
    """Gather host facts (cheap: no torch, no CUDA)."""
    environ = dict(os.environ) if environ is None else environ
    total, free = _statvfs("/dev/shm")
    ram_total, ram_available = _ram()
    return HostFacts(
        cpu_count=os.cpu_count(),
        usable_cpus=len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None,
        ram_total_bytes=ram_total,
        ram_available_bytes=ram_available,
        cgroup_memory_limit_bytes=_cgroup_limit(),
        shm_total_bytes=total,
        shm_free_bytes=free,
        in_container=Path("/.dockerenv").exists() or Path("/run/.containerenv").exists(),
        wsl=Path("/dev/dxg").exists(),
        python_version=platform.python_version(),
        platform=f"{platform.system()} {platform.release()} {platform.machine()}",
        env=relevant_env(environ),
        device_nodes=device_nodes(),
        torch_installs=torch_installs(),
        packages=installed_packages(),
    )


def relevant_env(environ: dict[str, str]) -> dict[str, str]:
    """The GPU-relevant variables that are set, sorted by name."""
    return {k: environ[k] for k in sorted(environ)
            if k in ENV_NAMES or k.startswith(ENV_PREFIXES)}


def device_nodes(pattern: str = "/dev/nvidia*") -> tuple[DeviceNode, ...]:
    """Every ``/dev/nvidia*`` file plus the two CUDA needs even when absent (ctl and uvm)."""
    paths = set(glob.glob(pattern))
    if pattern == "/dev/nvidia*":
        paths |= {"/dev/nvidiactl", "/dev/nvidia-uvm"}
    nodes = []
    for path in sorted(paths, key=_natural):
        if os.path.isdir(path):  # /dev/nvidia-caps: a folder, not a device
            continue
        try:
            mode = stat.filemode(os.stat(path).st_mode)
        except OSError:
            nodes.append(DeviceNode(path=path, exists=False))
            continue
        nodes.append(DeviceNode(path=path, exists=True, readable=os.access(path, os.R_OK),
                                writable=os.access(path, os.W_OK), mode=mode))
    return tuple(nodes)


def torch_installs() -> tuple[str, ...]:
    """``"<version> at <site dir>"`` for every torch distribution on ``sys.path``.

    More than one means two torches shadow each other (a venv and ``~/.local``, pip and conda).
    """
    seen = []
    for dist in metadata.distributions(name="torch"):
        where = str(dist.locate_file(""))
        entry = f"{dist.version} at {where}"
        if entry not in seen:
            seen.append(entry)
    return tuple(seen)


def installed_packages() -> dict[str, str]:
    """Exact versions of the packages that matter, as ``importlib.metadata`` sees them."""
    found: dict[str, str] = {}
    for dist in metadata.distributions():
        name = (dist.metadata["Name"] or "").lower().replace("_", "-")
        if (name in PACKAGES or name.startswith("nvidia-")) and name not in found:
            found[name] = dist.version
    return dict(sorted(found.items()))


def _statvfs(path: str) -> tuple[int | None, int | None]:
    try:
        st = os.statvfs(path)
    except OSError:
        return None, None
    return st.f_blocks * st.f_frsize, st.f_bavail * st.f_frsize


def _ram() -> tuple[int | None, int | None]:
    try:
        import psutil

        mem = psutil.virtual_memory()
        return int(mem.total), int(mem.available)
    except Exception:  # psutil missing or /proc unreadable
        return None, None


def _cgroup_limit() -> int | None:
    for path in ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"):
        try:
            text = Path(path).read_text().strip()
        except OSError:
            continue
        if text.isdigit() and int(text) < 1 << 60:  # cgroup v1 says "no limit" with a huge number
            return int(text)
        return None
    return None


def _natural(path: str) -> list[object]:
    return [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", path)]


if __name__ == "__main__":  # pragma: no cover - handy for eyeballing
    print(read_host(), file=sys.stdout)
