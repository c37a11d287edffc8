"""The torch side of ``gpudoctor check``, run as ``python -m gpudoctor.collectors.env.probe``.

It runs in a subprocess because creating a CUDA context can hang (seed 002 §2.1): the parent
kills it after ``--budget-s`` and keeps every line printed so far. Each line on stdout is one
JSON object: ``{"kind": "begin", "stage": ...}`` before a step that may hang, then the step's
result (``torch``, ``cpu``, ``device``, ``p2p``, ``nccl``) and finally ``done``.

Per visible GPU: context creation, a 1000×1000 allocation, free/total memory, a matmul checked
against the CPU in fp32 and bf16 and timed with CUDA events after warm-up (plus TF32), and a
small cuDNN convolution checked against the CPU. With ≥ 2 GPUs: the P2P access matrix and a
2-process NCCL all-reduce (``nccl_worker``), whose interpreters start while this one works.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import time
import warnings
from typing import Any

from gpudoctor.records.base import to_dict
from gpudoctor.records.env import GpuProbe, NcclProbe, TorchFacts

REPS = 5  # timed repetitions after warm-up; the median is kept


def emit(kind: str, **data: Any) -> None:
    """One JSON line on stdout, flushed at once so the parent keeps it even if we hang next."""
    sys.stdout.write(json.dumps({"kind": kind, **to_dict(data)}, allow_nan=False) + "\n")
    sys.stdout.flush()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m gpudoctor.collectors.env.probe")
    parser.add_argument("--budget-s", type=float, default=60.0)
    parser.add_argument("--matmul-n", type=int, default=4096)
    args = parser.parse_args(argv)
    start = time.perf_counter()
    emit("begin", stage="import torch")
    try:
        import torch
    except Exception as exc:  # not installed, or a broken install (missing libraries)
        emit("torch_error", error=f"{type(exc).__name__}: {exc}")
        return 0
    facts = torch_facts(torch)
    emit("torch", facts=facts)
    if not facts.cuda_available:
        emit("done")
        return 0
    workers = start_nccl_workers(facts.device_count)
    emit("begin", stage="CPU reference matmul")
    a, b, ref, ref_bf16, cpu_ms = cpu_reference(torch, args.matmul_n)
    emit("cpu", ms=cpu_ms)
    for index in range(facts.device_count):
        emit("begin", stage=f"context, allocation and compute on GPU {index}")
        emit("device", probe=probe_device(torch, index, a, b, ref, ref_bf16, cpu_ms))
    if facts.device_count >= 2:
        emit("begin", stage="P2P access matrix")
        n = facts.device_count
        emit("p2p", matrix=[[i != j and torch.cuda.can_device_access_peer(i, j) for j in range(n)]
                            for i in range(n)])
        emit("begin", stage="2-process NCCL all-reduce")
        remaining = args.budget_s - (time.perf_counter() - start) - 1.0
        emit("nccl", result=finish_nccl(workers, timeout_s=max(2.0, min(30.0, remaining))))
    emit("done")
    return 0


def torch_facts(torch: Any) -> TorchFacts:
    """Build and library facts; ``torch.cuda.init()`` gives the reason when CUDA is unusable."""
    cuda_error = ""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        available = torch.cuda.is_available()
    if not available:
        try:
            torch.cuda.init()
        except Exception as exc:
            cuda_error = str(exc).strip()
        if not cuda_error and caught:
            cuda_error = str(caught[-1].message).strip()
    cudnn_version, cudnn_error = None, ""
    try:
        cudnn_version = torch.backends.cudnn.version()
    except Exception as exc:
        cudnn_error = f"{type(exc).__name__}: {exc}"
    nccl_version, nccl_error = None, ""
    try:
        if torch.version.cuda is not None:
            nccl_version = ".".join(str(p) for p in torch.cuda.nccl.version())
    except Exception as exc:
        nccl_error = f"{type(exc).__name__}: {exc}"
    try:
        arch_list = tuple(torch.cuda.get_arch_list())
    except Exception:
        arch_list = ()
    return TorchFacts(
        version=torch.__version__, cuda=torch.version.cuda,
        hip=getattr(torch.version, "hip", None), path=os.path.dirname(torch.__file__),
        cuda_available=available, cuda_error=cuda_error,
        device_count=torch.cuda.device_count() if available else 0, arch_list=arch_list,
        cudnn_version=cudnn_version, cudnn_enabled=bool(torch.backends.cudnn.enabled),
        cudnn_error=cudnn_error, nccl_version=nccl_version, nccl_error=nccl_error,
        matmul_allow_tf32=bool(torch.backends.cuda.matmul.allow_tf32),
        cudnn_allow_tf32=bool(torch.backends.cudnn.allow_tf32),
        float32_matmul_precision=torch.get_float32_matmul_precision(),
    )


def cpu_reference(torch: Any, n: int):
    """Seeded inputs and their CPU products (fp32, and of bf16-rounded inputs); CPU time in ms."""
    gen = torch.Generator().manual_seed(1234)
    a = torch.randn(n, n, generator=gen)
    b = torch.randn(n, n, generator=gen)
    torch.randn(256, 256) @ torch.randn(256, 256)  # warm-up: start the BLAS thread pool
    t0 = time.perf_counter()
    ref = a @ b  # host code: time.perf_counter is the right clock here
    cpu_ms = (time.perf_counter() - t0) * 1000.0
    ref_bf16 = a.bfloat16().float() @ b.bfloat16().float()
    return a, b, ref, ref_bf16, cpu_ms


def probe_device(torch: Any, index: int, a, b, ref, ref_bf16, cpu_ms: float) -> GpuProbe:
    """Context → allocation → memory → matmul → conv on GPU ``index``; errors become fields."""
    from gpudoctor.core.specs import match_spec

    dev = torch.device("cuda", index)
    out: dict[str, Any] = {"index": index, "cpu_fp32_ms": cpu_ms, "matmul_n": a.shape[0]}
    try:
        props = torch.cuda.get_device_properties(index)
        out.update(name=props.name, capability=(props.major, props.minor))
        spec = match_spec(props.name)
        if spec is not None:
            out.update(spec_key=spec.key, spec_bf16_tflops=spec.bf16)
        t0 = time.perf_counter()
        torch.zeros(1, device=dev)
        torch.cuda.synchronize(dev)  # sync point: the context exists once this returns
        out.update(context_ok=True, context_ms=(time.perf_counter() - t0) * 1000.0)
        x = torch.randn(1000, 1000, device=dev)
        torch.cuda.synchronize(dev)  # sync point: the allocation and kernel really ran
        del x
        free, total = torch.cuda.mem_get_info(dev)
        out.update(alloc_ok=True, free_memory_bytes=int(free), total_memory_bytes=int(total))
        out["bf16_supported"] = bool(props.major >= 8)
    except Exception as exc:
        out["error"] = f"{type(exc).__name__}: {exc}".strip()
        return GpuProbe(**out)
    try:
        out.update(matmul_checks(torch, dev, a, b, ref, ref_bf16, out["bf16_supported"]))
    except Exception as exc:
        out["matmul_error"] = f"{type(exc).__name__}: {exc}".strip()
    try:
        out.update(conv_check(torch, dev))
    except Exception as exc:
        out.update(conv_ok=False, conv_error=f"{type(exc).__name__}: {exc}".strip())
    torch.cuda.empty_cache()  # hand the probe's memory back before the next GPU / NCCL
    return GpuProbe(**out)


def _timed_ms(torch: Any, dev, fn) -> float:
    """Median CUDA-event time of ``fn`` after two warm-up calls."""
    with torch.cuda.device(dev):
        fn(), fn()
        times = []
        for _ in range(REPS):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            end.synchronize()  # sync point: wait for this repetition before reading its time
            times.append(start.elapsed_time(end))
    return statistics.median(times)


def _rel_err(torch: Any, got, ref) -> float:
    return float(torch.linalg.norm(got.float() - ref) / torch.linalg.norm(ref))


def matmul_checks(torch: Any, dev, a, b, ref, ref_bf16, bf16: bool) -> dict[str, Any]:
    """fp32 (TF32 off) and bf16 products vs the CPU, and fp32/TF32/bf16 times."""
    matmul = torch.backends.cuda.matmul
    saved = matmul.allow_tf32
    ag, bg = a.to(dev), b.to(dev)
    try:
        matmul.allow_tf32 = False
        res: dict[str, Any] = {"fp32_rel_err": _rel_err(torch, (ag @ bg).cpu(), ref)}  # .cpu() syncs
        res["fp32_ms"] = _timed_ms(torch, dev, lambda: ag @ bg)
        matmul.allow_tf32 = True
        res["tf32_ms"] = _timed_ms(torch, dev, lambda: ag @ bg)
    finally:
        matmul.allow_tf32 = saved
    if bf16:
        ah, bh = ag.bfloat16(), bg.bfloat16()
        res["bf16_rel_err"] = _rel_err(torch, (ah @ bh).cpu(), ref_bf16)  # .cpu() syncs
        res["bf16_ms"] = _timed_ms(torch, dev, lambda: ah @ bh)
    return res


def conv_check(torch: Any, dev) -> dict[str, Any]:
    """A small conv2d through cuDNN (TF32 off so fp32 is comparable) against the CPU."""
    gen = torch.Generator().manual_seed(7)
    x = torch.randn(8, 16, 32, 32, generator=gen)
    w = torch.randn(32, 16, 3, 3, generator=gen)
    ref = torch.nn.functional.conv2d(x, w, padding=1)
    saved = torch.backends.cudnn.allow_tf32
    try:
        torch.backends.cudnn.allow_tf32 = False
        got = torch.nn.functional.conv2d(x.to(dev), w.to(dev), padding=1).cpu()  # .cpu() syncs
    finally:
        torch.backends.cudnn.allow_tf32 = saved
    err = _rel_err(torch, got, ref)
    return {"conv_ok": True, "conv_rel_err": err}


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_nccl_workers(device_count: int, *, backend: str = "nccl",
                       extra: tuple[str, ...] = ()) -> list[subprocess.Popen] | None:
    """Start 2 worker interpreters now (importing torch takes seconds); they wait for "go"."""
    if device_count < 2:
        return None
    port = _free_port()
    return [
        subprocess.Popen(
            [sys.executable, "-m", "gpudoctor.collectors.env.nccl_worker", "--rank", str(rank),
             "--world-size", "2", "--port", str(port), "--backend", backend, *extra],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )
        for rank in range(2)
    ]


def finish_nccl(workers: list[subprocess.Popen] | None, *, timeout_s: float) -> NcclProbe:
    """Release the workers, wait at most ``timeout_s`` and read rank 0's verdict."""
    if not workers:
        return NcclProbe(status="failed", error="the workers did not start")
    deadline = time.monotonic() + timeout_s
    outputs = []
    for proc in workers:
        try:
            proc.stdin.write("go\n")
            proc.stdin.flush()
        except OSError:
            pass  # it died while importing torch: its stderr says why
    for proc in workers:
        try:
            out, err = proc.communicate(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            for p in workers:
                p.kill()
            for p in workers:
                p.communicate()
            return NcclProbe(status="timeout",
                             error=f"the all-reduce did not finish within {timeout_s:.0f} s")
        outputs.append((proc.returncode, out, err))
    for rank, (code, out, err) in enumerate(outputs):
        if code != 0 or (rank == 0 and not out.strip()):
            tail = " | ".join(err.strip().splitlines()[-3:])
            return NcclProbe(status="failed", error=f"rank {rank} exited with {code}: {tail}"[:600])
    return NcclProbe(**json.loads(outputs[0][1].strip().splitlines()[-1]))


if __name__ == "__main__":
    sys.exit(main())
