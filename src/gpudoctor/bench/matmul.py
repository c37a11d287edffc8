"""Matmul throughput per dtype, compared with the datasheet peak of this GPU.

Square ``N x N @ N x N`` products of random normal inputs (zeros would let some hardware skip
work and would not exercise the data paths honestly), ``2·N³`` FLOPs per product. On a GPU:
fp32 (CUDA cores, TF32 off), tf32, bf16, fp16 and fp8 (``torch._scaled_mm``, e4m3 inputs,
bf16 output, per-tensor scales, fast accumulation) where the GPU has fp8 tensor cores. On a
CPU: fp32 and bf16 in GFLOP/s (no reference: unjudged).
"""

from __future__ import annotations

from collections.abc import Callable

from gpudoctor.bench.protocol import Protocol, median_ms, throughput, time_gpu, time_host
from gpudoctor.core.specs import match_spec
from gpudoctor.records.bench import BenchResult, BenchSkip, LinkState

GPU_DTYPES = ("fp32", "tf32", "bf16", "fp16", "fp8")
CPU_DTYPES = ("fp32", "bf16")
GPU_SIZE = 8192  # saturates Hopper/Ampere tensor cores; one bf16 product is ~1.4 ms on an H200
CPU_SIZE = 1024
GPU_PROTOCOL = Protocol(warmup=5, repeats=20)
CPU_PROTOCOL = Protocol(warmup=1, repeats=5)
LOAD_CALLS = 50  # extra products queued behind the timed ones while clocks are read under load


def _fp8_unsupported(torch, device) -> str | None:
    """Why fp8 matmul cannot run here, or ``None`` when it can."""
    if not hasattr(torch, "_scaled_mm") or not hasattr(torch, "float8_e4m3fn"):
        return f"torch {torch.__version__} has no torch._scaled_mm / float8_e4m3fn"
    major, minor = torch.cuda.get_device_capability(device)
    if (major, minor) < (8, 9):
        return f"compute capability {major}.{minor} has no fp8 tensor cores (needs 8.9+: Ada, Hopper or newer)"
    return None


def _operands(torch, dtype: str, n: int, device):
    """Random inputs for one ``n``-sized product and the call that multiplies them."""
    if dtype == "fp8":
        a = torch.randn(n, n, device=device).to(torch.float8_e4m3fn)
        b = torch.randn(n, n, device=device).to(torch.float8_e4m3fn).t()  # column-major, as cuBLASLt wants
        scale = torch.ones((), device=device, dtype=torch.float32)

        def call():
            return torch._scaled_mm(a, b, scale_a=scale, scale_b=scale, out_dtype=torch.bfloat16, use_fast_accum=True)

        return call
    torch_dtype = {"fp32": torch.float32, "tf32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}[dtype]
    a = torch.randn(n, n, device=device, dtype=torch_dtype)
    b = torch.randn(n, n, device=device, dtype=torch_dtype)
    out = torch.empty(n, n, device=device, dtype=torch_dtype)
    return lambda: torch.mm(a, b, out=out)


def _precision(torch, dtype: str) -> str:
    """Set the fp32 matmul precision this dtype means; return the previous one to restore."""
    previous = torch.get_float32_matmul_precision()
    if dtype == "tf32":
        torch.set_float32_matmul_precision("high")
    elif dtype == "fp32":
        torch.set_float32_matmul_precision("highest")
    return previous


def run_matmul(
    device,
    *,
    dtypes: tuple[str, ...] | None = None,
    sizes: tuple[int, ...] | None = None,
    during: Callable[[], LinkState] | None = None,
) -> tuple[list[BenchResult], list[BenchSkip], LinkState | None]:
    """Measure matmul throughput on ``device`` (a ``torch.device``).

    Args:
        device: ``cuda:N`` or ``cpu``.
        dtypes: subset of :data:`GPU_DTYPES` (GPU) or :data:`CPU_DTYPES` (CPU); default all.
        sizes: square sizes N; default :data:`GPU_SIZE` / :data:`CPU_SIZE`.
        during: called once while the bf16 runs (or the first dtype's) are still executing, to
            read clocks and throttle reasons under load.

    Returns:
        results, skipped dtypes with reasons, and what ``during`` returned (or ``None``).
    """
    import torch

    on_gpu = device.type == "cuda"
    allowed = GPU_DTYPES if on_gpu else CPU_DTYPES
    dtypes = dtypes or allowed
    sizes = sizes or ((GPU_SIZE,) if on_gpu else (CPU_SIZE,))
    results: list[BenchResult] = []
    skipped: list[BenchSkip] = []
    under_load: LinkState | None = None
    name = torch.cuda.get_device_name(device) if on_gpu else "cpu"
    spec = match_spec(name) if on_gpu else None
    probe_dtype = "bf16" if "bf16" in dtypes else dtypes[0]
    for dtype in dtypes:
        if dtype not in allowed:
            where = "GPU" if on_gpu else "CPU"
            reason = "tensor-core formats need a GPU" if not on_gpu else f"not one of {', '.join(allowed)}"
            skipped.append(BenchSkip(section="matmul", what=dtype, reason=f"{dtype} on {where}: {reason}"))
            continue
        if on_gpu and dtype == "fp8" and (why := _fp8_unsupported(torch, device)):
            skipped.append(BenchSkip(section="matmul", what="fp8", reason=why))
            continue
        for n in sizes:
            previous = _precision(torch, dtype)
            call = hook = None
            try:
                call = _operands(torch, dtype, n, device)
                if on_gpu:
                    if during is not None and dtype == probe_dtype and under_load is None:
                        def hook(call=call):
                            nonlocal under_load
                            for _ in range(LOAD_CALLS):  # untimed: keeps the GPU busy while NVML is read
                                call()
                            under_load = during()
                    times = time_gpu(call, GPU_PROTOCOL, during=hook)
                else:
                    times = time_host(call, CPU_PROTOCOL)
            except (RuntimeError, NotImplementedError) as exc:  # e.g. an fp8 kernel missing in this build
                skipped.append(BenchSkip(section="matmul", what=f"{dtype} {n}", reason=str(exc).splitlines()[0][:200]))
                continue
            finally:
                torch.set_float32_matmul_precision(previous)
                call = hook = None  # drop the operands before the next size allocates
                if on_gpu:
                    torch.cuda.empty_cache()
            results.append(_result(dtype, n, times, on_gpu, device, spec))
    return results, skipped, under_load


def _result(dtype: str, n: int, times_ms: list[float], on_gpu: bool, device, spec) -> BenchResult:
    scale = 1e12 if on_gpu else 1e9
    stats = throughput(2.0 * n**3, times_ms, scale=scale)
    peak = spec.peak_tflops(dtype) if spec is not None else None
    note = {
        "fp32": "TF32 off (float32_matmul_precision='highest')",
        "tf32": "fp32 inputs, TF32 tensor cores (float32_matmul_precision='high')",
        "fp8": "torch._scaled_mm e4m3 x e4m3 -> bf16, per-tensor scale, fast accumulation",
    }.get(dtype, "")
    if not on_gpu:
        note = "CPU: no datasheet peak to compare with"
    elif spec is None:
        note = (note + "; " if note else "") + "GPU not in data/gpu_specs.toml: no peak to compare with"
    return BenchResult(
        section="matmul",
        op="matmul",
        dtype=dtype,
        size=f"{n}x{n}x{n}",
        device=str(device),
        unit="TFLOP/s" if on_gpu else "GFLOP/s",
        median=stats.median,
        p10=stats.p10,
        p90=stats.p90,
        repeats=stats.count,
        time_ms=median_ms(times_ms),
        peak=peak,
        peak_source=f"{spec.name} datasheet, dense" if peak is not None else "",
        fraction_of_peak=stats.median / peak if peak else None,
        note=note,
    )
