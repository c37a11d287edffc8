"""``--freeze`` / ``--against``: record what matters for reproducing an environment, and say
which differences from a recorded one can change results or speed (seed 003 §5).

Pure: facts in, records out; the CLI reads and writes the file.
"""

from __future__ import annotations

from gpudoctor.analysis.env_text import cuda_tag, cudnn_words, version_tuple
from gpudoctor.records.env import EnvDifference, EnvFacts, FrozenEnv, Verdict
from gpudoctor.records.units import MISSING

KIND = "gpudoctor.frozen-env"
# Per-machine or per-run variables: they differ between machines without changing anything.
NOT_FROZEN_ENV = {"CUDA_VISIBLE_DEVICES", "NVIDIA_VISIBLE_DEVICES", "LD_LIBRARY_PATH", "RANK",
                  "LOCAL_RANK", "WORLD_SIZE", "NODE_RANK", "MASTER_ADDR", "MASTER_PORT"}

WHY_PACKAGE = {
    "torch": "different releases pick different kernels and defaults: last-bit results and speed change",
    "numpy": "random streams and dtype promotion rules change between versions",
    "triton": "torch.compile generates its kernels with it: speed and compile failures change",
    "torchvision": "image decoding and transforms change pixel values and loader speed",
}
WHY_ENV = {
    "NVIDIA_TF32_OVERRIDE": "forces TF32 on or off for every fp32 matmul: results (~1e-3) and speed change",
    "TORCH_ALLOW_TF32_CUBLAS_OVERRIDE": "turns TF32 on for fp32 matmuls: results and speed change",
    "CUBLAS_WORKSPACE_CONFIG": "deterministic cuBLAS needs it (':4096:8'); without it results may vary run to run",
    "PYTORCH_CUDA_ALLOC_CONF": "allocator settings change fragmentation, peak memory and when OOM happens",
    "PYTORCH_ALLOC_CONF": "allocator settings change fragmentation, peak memory and when OOM happens",
    "OMP_NUM_THREADS": "CPU ops and data loading run on this many threads: speed changes",
    "CUDA_LAUNCH_BLOCKING": "makes every kernel launch synchronous: much slower",
    "CUDA_MODULE_LOADING": "eager module loading costs start-up time and memory",
}


NUMERICS_SPEED, NUMERICS, SPEED = "numerics and speed", "numerics", "speed"
# What a difference can change, by field: torch, its CUDA variant, cuDNN, NCCL (its algorithm
# picks the reduction order of an all-reduce) and the CUDA library wheels pick other kernels,
# which change last-bit results and speed; the driver changes clocks and PTX compilation.
CHANGES = {"gpu": NUMERICS_SPEED, "torch variant": NUMERICS_SPEED, "torch": NUMERICS_SPEED,
           "driver CUDA": SPEED, "driver": SPEED, "cuDNN": NUMERICS_SPEED, "NCCL": NUMERICS_SPEED,
           "package numpy": NUMERICS, "package triton": SPEED, "package torchvision": NUMERICS_SPEED,
           "env NVIDIA_TF32_OVERRIDE": NUMERICS_SPEED, "env TORCH_ALLOW_TF32_CUBLAS_OVERRIDE": NUMERICS_SPEED,
           "env CUBLAS_WORKSPACE_CONFIG": NUMERICS, "env PYTORCH_CUDA_ALLOC_CONF": SPEED,
           "env PYTORCH_ALLOC_CONF": SPEED, "env OMP_NUM_THREADS": SPEED, "env CUDA_LAUNCH_BLOCKING": SPEED,
           "env CUDA_MODULE_LOADING": SPEED}


def changes_of(field: str) -> str:
    """What a difference in ``field`` can change (``""``: neither, as far as is known)."""
    if field in CHANGES:
        return CHANGES[field]
    if field.startswith("package nvidia-") and field != "package nvidia-ml-py":
        return NUMERICS_SPEED
    if field.startswith(("env NCCL_", "env TORCH_NCCL_")):
        return SPEED
    if field.startswith("torch."):  # TF32 / cuDNN defaults
        return NUMERICS_SPEED
    return ""


def freeze(facts: EnvFacts) -> FrozenEnv:
    """What to write for ``--freeze``: versions, the torch variant's tag, packages, settings."""
    torch = facts.torch
    defaults: dict[str, str] = {}
    if torch is not None:
        defaults = {
            "torch.backends.cuda.matmul.allow_tf32": str(torch.matmul_allow_tf32),
            "torch.backends.cudnn.allow_tf32": str(torch.cudnn_allow_tf32),
            "torch.get_float32_matmul_precision()": torch.float32_matmul_precision,
            "torch.backends.cudnn.enabled": str(torch.cudnn_enabled),
        }
    names = tuple(d.name for d in facts.devices) or tuple(g.name for g in facts.driver.gpus)
    return FrozenEnv(
        python=facts.host.python_version, platform=facts.host.platform,
        driver_version=facts.driver.version, driver_cuda_version=facts.driver.cuda_version,
        torch_version=torch.version if torch else None, torch_cuda=torch.cuda if torch else None,
        torch_variant=cuda_tag(torch.cuda, torch.hip) if torch else None,
        cudnn_version=torch.cudnn_version if torch else None,
        nccl_version=torch.nccl_version if torch else None,
        gpu_names=names, packages=dict(facts.host.packages),
        env={k: v for k, v in facts.host.env.items() if k not in NOT_FROZEN_ENV},
        defaults=defaults,
    )


def _s(value: object) -> str:
    return MISSING if value is None or value == "" else str(value)


def diff(here: FrozenEnv, there: FrozenEnv) -> list[EnvDifference]:
    """Differences between this environment (``here``) and a frozen one (``there``)."""
    out: list[EnvDifference] = []

    def add(field: str, a: object, b: object, why: str, verdict: Verdict = Verdict.WARN) -> None:
        if a != b:
            out.append(EnvDifference(field=field, here=_s(a), there=_s(b), verdict=verdict, why=why,
                                     changes=changes_of(field)))

    add("gpu", ", ".join(here.gpu_names), ", ".join(there.gpu_names),
        "another GPU model or count: different peak speed and memory, maybe no bf16/TF32")
    variant_verdict = Verdict.FAIL if here.torch_variant == "cpu" != there.torch_variant else Verdict.WARN
    add("torch variant", here.torch_variant, there.torch_variant,
        "another CUDA runtime ships other cuBLAS/cuDNN kernels; a cpu variant trains on the CPU",
        variant_verdict)
    add("torch", here.torch_version, there.torch_version, WHY_PACKAGE["torch"])
    if here.driver_cuda_version and there.torch_cuda and version_tuple(here.driver_cuda_version)[:1] \
            < version_tuple(there.torch_cuda)[:1]:
        add("driver CUDA", here.driver_cuda_version, there.driver_cuda_version,
            f"this driver cannot run the frozen torch build (CUDA {there.torch_cuda})", Verdict.FAIL)
    else:
        add("driver CUDA", here.driver_cuda_version, there.driver_cuda_version,
            "the driver's CUDA ceiling decides which torch builds can run")
    add("driver", here.driver_version, there.driver_version,
        "the driver compiles PTX and manages clocks: speed can change, results rarely")
    add("cuDNN", cudnn_words(here.cudnn_version) if here.cudnn_version else None,
        cudnn_words(there.cudnn_version) if there.cudnn_version else None,
        "cuDNN chooses convolution algorithms per version: conv results and speed change")
    add("NCCL", here.nccl_version, there.nccl_version,
        "collective algorithms differ; nodes with different NCCL versions can hang together")
    if version_tuple(here.python)[:2] != version_tuple(there.python)[:2]:
        add("python", here.python, there.python, "another Python minor version gets other wheels")
    for name in sorted(set(here.packages) | set(there.packages)):
        if name == "torch":
            continue
        why = WHY_PACKAGE.get(name) or ("a CUDA library wheel: its kernels decide results and speed"
                                        if name.startswith("nvidia-") else
                                        "another version can change results or speed")
        add(f"package {name}", here.packages.get(name, "not installed"),
            there.packages.get(name, "not installed"), why)
    for key in sorted(set(here.env) | set(there.env)):
        why = WHY_ENV.get(key) or ("changes NCCL's transport or algorithms: speed, sometimes hangs"
                                   if key.startswith(("NCCL_", "TORCH_NCCL_")) else
                                   "changes how CUDA or torch behaves")
        add(f"env {key}", here.env.get(key, "unset"), there.env.get(key, "unset"), why)
    for key in sorted(set(here.defaults) | set(there.defaults)):
        add(key, here.defaults.get(key), there.defaults.get(key),
            "TF32/cuDNN defaults change fp32 matmul and conv results (~1e-3) and speed (up to 8×)")
    return out
