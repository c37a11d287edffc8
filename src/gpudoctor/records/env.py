"""Environment check results: one row per check, grouped by layer."""

from __future__ import annotations

import dataclasses
import enum

from gpudoctor.records.base import record


class Verdict(enum.Enum):
    """A check's outcome. ``SKIP`` means it could not run because a lower layer failed or is absent."""

    PASS = "pass"
    WARN = "warn"
    FAIL = "fail"
    SKIP = "skip"


class Layer(enum.Enum):
    """The layers of a GPU training stack, bottom first; a failure low down explains those above."""

    DRIVER = "driver"
    RUNTIME = "runtime"
    DEVICES = "devices"
    CONTEXT = "context"
    COMPUTE = "compute"
    LIBRARIES = "libraries"
    COMMUNICATION = "communication"
    HOST = "host"


@record
class CheckResult:
    """One row of ``gpudoctor check``.

    Attributes:
        layer: the layer the check belongs to.
        name: short stable name, e.g. ``"driver.version"``.
        verdict: pass / warn / fail / skip.
        evidence: what was observed, in one or two lines.
        fix: what to do when the verdict is not pass; ``""`` otherwise.
        duration_ms: how long the check took.
    """

    layer: Layer
    name: str
    verdict: Verdict
    evidence: str
    fix: str = ""
    duration_ms: float = 0.0


@record
class CheckReport:
    """All rows of one ``gpudoctor check`` run plus a one-line summary."""

    results: tuple[CheckResult, ...]
    summary: str
    duration_ms: float = 0.0

    @property
    def worst(self) -> Verdict:
        order = (Verdict.SKIP, Verdict.PASS, Verdict.WARN, Verdict.FAIL)
        worst = Verdict.PASS
        for result in self.results:
            if order.index(result.verdict) > order.index(worst):
                worst = result.verdict
        return worst


# --- observed facts -------------------------------------------------------------------------
# The probes (``gpudoctor.collectors.env``) fill these; the rules (``analysis.env_rules``) read
# them. A fact a probe could not observe is ``None`` and, where it helps, an ``*_error`` string
# says why. Tests build these by hand to inject a broken environment.


@record
class GpuInfo:
    """One GPU as the driver lists it (NVML, or ``nvidia-smi --query-gpu=index,name,uuid,...``)."""

    index: int
    name: str
    uuid: str = ""
    memory_total_bytes: int | None = None
    memory_used_bytes: int | None = None


@record
class GpuMemoryUser:
    """A process holding GPU memory before the check started (``nvidia-smi --query-compute-apps``)."""

    gpu_index: int
    pid: int
    used_bytes: int | None = None
    process_name: str = ""


@record
class DriverFacts:
    """The NVIDIA kernel driver, read through NVML or, failing that, ``nvidia-smi``.

    Attributes:
        source: ``"nvml"``, ``"nvidia-smi"`` or ``"none"`` (neither answered).
        version: driver version, e.g. ``"580.95.05"``.
        cuda_version: the highest CUDA version this driver supports, e.g. ``"13.0"``.
        error: why NVML / nvidia-smi gave nothing (their own words).
        pci_nvidia_gpus: NVIDIA display/3D controllers on the PCI bus (sysfs); ``None`` if unreadable.
    """

    source: str
    version: str | None = None
    cuda_version: str | None = None
    gpus: tuple[GpuInfo, ...] = ()
    memory_users: tuple[GpuMemoryUser, ...] = ()
    error: str = ""
    pci_nvidia_gpus: int | None = None


@record
class DeviceNode:
    """One ``/dev/nvidia*`` file and what this user may do with it (``os.access``)."""

    path: str
    exists: bool
    readable: bool = False
    writable: bool = False
    mode: str = ""


@record
class HostFacts:
    """The host around the GPUs: CPUs, RAM, ``/dev/shm``, relevant environment variables."""

    cpu_count: int | None = None
    usable_cpus: int | None = None
    ram_total_bytes: int | None = None
    ram_available_bytes: int | None = None
    cgroup_memory_limit_bytes: int | None = None
    shm_total_bytes: int | None = None
    shm_free_bytes: int | None = None
    in_container: bool = False
    wsl: bool = False
    python_version: str = ""
    platform: str = ""
    env: dict[str, str] = dataclasses.field(default_factory=dict)
    device_nodes: tuple[DeviceNode, ...] = ()
    torch_installs: tuple[str, ...] = ()
    packages: dict[str, str] = dataclasses.field(default_factory=dict)


@record
class TorchFacts:
    """What the probe subprocess learnt from ``import torch`` (before touching any GPU)."""

    version: str
    cuda: str | None = None
    hip: str | None = None
    path: str = ""
    cuda_available: bool = False
    cuda_error: str = ""
    device_count: int = 0
    arch_list: tuple[str, ...] = ()
    cudnn_version: int | None = None
    cudnn_enabled: bool | None = None
    cudnn_error: str = ""
    nccl_version: str | None = None
    nccl_error: str = ""
    matmul_allow_tf32: bool | None = None
    cudnn_allow_tf32: bool | None = None
    float32_matmul_precision: str = ""


@record
class GpuProbe:
    """Context, allocation and compute on one visible GPU (``torch`` index), in the subprocess.

    Times are CUDA-event medians after warm-up; ``cpu_fp32_ms`` is the same matmul on the CPU.
    Relative errors are ``‖gpu − cpu‖ / ‖cpu‖`` against a float32 CPU reference.
    """

    index: int
    name: str = ""
    capability: tuple[int, int] | None = None
    context_ok: bool = False
    context_ms: float | None = None
    alloc_ok: bool = False
    free_memory_bytes: int | None = None
    total_memory_bytes: int | None = None
    error: str = ""
    matmul_n: int = 0
    fp32_rel_err: float | None = None
    bf16_rel_err: float | None = None
    fp32_ms: float | None = None
    tf32_ms: float | None = None
    bf16_ms: float | None = None
    cpu_fp32_ms: float | None = None
    matmul_error: str = ""
    conv_ok: bool | None = None
    conv_rel_err: float | None = None
    conv_error: str = ""
    bf16_supported: bool | None = None
    spec_key: str | None = None
    spec_bf16_tflops: float | None = None


@record
class NcclProbe:
    """A 2-process NCCL all-reduce on GPUs 0 and 1 over 127.0.0.1.

    ``status`` is ``"ok"``, ``"wrong_sum"``, ``"failed"`` or ``"timeout"``.
    """

    status: str
    world_size: int = 2
    expected: float | None = None
    got: float | None = None
    bytes: int = 0
    ms: float | None = None
    error: str = ""


@record
class ProbeRun:
    """How the torch probe subprocess ended.

    ``status`` is ``"ok"``, ``"timeout"`` (killed after ``timeout_s`` while doing ``stage``),
    ``"crashed"`` (non-zero exit) or ``"not_run"``.
    """

    status: str
    timeout_s: float = 0.0
    duration_ms: float = 0.0
    stage: str = ""
    returncode: int | None = None
    error: str = ""
    stderr_tail: str = ""


@record
class EnvFacts:
    """Everything ``gpudoctor check`` observed; the rules turn it into rows."""

    driver: DriverFacts
    host: HostFacts
    probe: ProbeRun
    torch: TorchFacts | None = None
    devices: tuple[GpuProbe, ...] = ()
    p2p: tuple[tuple[bool, ...], ...] | None = None
    nccl: NcclProbe | None = None
    gathered_ms: float = 0.0


# --- reproducing an environment (--freeze / --against) --------------------------------------


@record
class FrozenEnv:
    """What matters for reproducing an environment (``gpudoctor check --freeze FILE``).

    ``torch_variant`` names the PyTorch wheel index that serves this build by its tag
    (``"cu130"``, ``"cu126"``, ``"cpu"``, ``"rocm6.4"``): reinstall with pip's ``--index-url``
    pointing at PyTorch's index for that tag.
    """

    python: str
    platform: str
    driver_version: str | None
    driver_cuda_version: str | None
    torch_version: str | None
    torch_cuda: str | None
    torch_variant: str | None
    cudnn_version: int | None
    nccl_version: str | None
    gpu_names: tuple[str, ...]
    packages: dict[str, str]
    env: dict[str, str]
    defaults: dict[str, str]


@record
class EnvDifference:
    """One difference between this environment and a frozen one (``--against FILE``)."""

    field: str
    here: str
    there: str
    verdict: Verdict
    why: str
    changes: str = ""  # what it can change: "numerics and speed", "numerics", "speed" or ""
