"""Facts of known machines, built by hand: tests change one fact and check what the rules say."""

from __future__ import annotations

import dataclasses

import pytest

from gpudoctor.records.env import (
    DeviceNode,
    DriverFacts,
    EnvFacts,
    GpuInfo,
    GpuProbe,
    HostFacts,
    NcclProbe,
    ProbeRun,
    TorchFacts,
)

GIB = 1024**3
H200_BYTES = 150_754_820_096


def _node(path: str) -> DeviceNode:
    return DeviceNode(path=path, exists=True, readable=True, writable=True, mode="crw-rw-rw-")


def _probe(index: int) -> GpuProbe:
    return GpuProbe(
        index=index, name="NVIDIA H200", capability=(9, 0), context_ok=True, context_ms=412.0,
        alloc_ok=True, free_memory_bytes=H200_BYTES - 600 * 1024**2, total_memory_bytes=H200_BYTES,
        matmul_n=4096, fp32_rel_err=1.9e-6, bf16_rel_err=3.1e-3, fp32_ms=2.9, tf32_ms=0.34,
        bf16_ms=0.2, cpu_fp32_ms=310.0, conv_ok=True, conv_rel_err=4.2e-7, bf16_supported=True,
        spec_key="H200-SXM", spec_bf16_tflops=989.4,
    )


def healthy(gpus: int = 2) -> EnvFacts:
    """Two (or ``gpus``) H200s, driver 580, torch cu130: every row should pass."""
    return EnvFacts(
        driver=DriverFacts(
            source="nvml", version="580.95.05", cuda_version="13.0", pci_nvidia_gpus=gpus,
            gpus=tuple(GpuInfo(index=i, name="NVIDIA H200", uuid=f"GPU-{i}aaa-bbbb",
                               memory_total_bytes=H200_BYTES, memory_used_bytes=0)
                       for i in range(gpus)),
        ),
        host=HostFacts(
            cpu_count=32, usable_cpus=32, ram_total_bytes=256 * GIB, ram_available_bytes=240 * GIB,
            shm_total_bytes=128 * GIB, shm_free_bytes=128 * GIB, python_version="3.12.3",
            platform="Linux 6.8.0 x86_64",
            device_nodes=tuple(_node(p) for p in
                               ["/dev/nvidia-uvm", "/dev/nvidiactl",
                                *[f"/dev/nvidia{i}" for i in range(gpus)]]),
            torch_installs=("2.11.0+cu130 at /usr/lib/python3/site-packages",),
            packages={"numpy": "2.2.1", "torch": "2.11.0+cu130", "triton": "3.5.0"},
        ),
        probe=ProbeRun(status="ok", timeout_s=60.0, duration_ms=4200.0, returncode=0),
        torch=TorchFacts(
            version="2.11.0+cu130", cuda="13.0", path="/usr/lib/python3/site-packages/torch",
            cuda_available=True, device_count=gpus,
            arch_list=("sm_75", "sm_80", "sm_86", "sm_90", "sm_100", "sm_120"),
            cudnn_version=91300, cudnn_enabled=True, nccl_version="2.27.7",
            matmul_allow_tf32=False, cudnn_allow_tf32=True, float32_matmul_precision="highest",
        ),
        devices=tuple(_probe(i) for i in range(gpus)),
        p2p=tuple(tuple(i != j for j in range(gpus)) for i in range(gpus)) if gpus > 1 else None,
        nccl=NcclProbe(status="ok", expected=3.0, got=3.0, bytes=64 * 1024**2, ms=0.41)
        if gpus > 1 else None,
        gathered_ms=4350.0,
    )


def cpu_only() -> EnvFacts:
    """This CI machine: no GPU, no driver, a CUDA build of torch that finds no driver."""
    base = healthy(1)
    return dataclasses.replace(
        base,
        driver=DriverFacts(source="none", pci_nvidia_gpus=0,
                           error="NVML: NVMLError_LibraryNotFound: NVML Shared Library Not Found; "
                                 "nvidia-smi: nvidia-smi not found on PATH"),
        host=dataclasses.replace(base.host, device_nodes=(
            DeviceNode(path="/dev/nvidia-uvm", exists=False),
            DeviceNode(path="/dev/nvidiactl", exists=False)), cpu_count=2, usable_cpus=2),
        torch=dataclasses.replace(base.torch, cuda_available=False, device_count=0,
                                  cuda_error="Found no NVIDIA driver on your system. Please check"),
        devices=(), p2p=None, nccl=None, gathered_ms=3100.0,
    )


def replace(obj, **changes):
    return dataclasses.replace(obj, **changes)


@pytest.fixture
def facts_factory():
    """``facts_factory.healthy(n)``, ``facts_factory.cpu_only()``, ``facts_factory.replace``."""
    class Factory:
        pass

    factory = Factory()
    factory.healthy = healthy
    factory.cpu_only = cpu_only
    factory.replace = replace
    return factory
