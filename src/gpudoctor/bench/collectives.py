"""Collective bandwidth (all_reduce, all_gather, reduce_scatter) under torchrun, nccl-tests style.

Run by :func:`launch_collectives` as
``torchrun --standalone --nproc_per_node N -m gpudoctor.bench.collectives --out FILE ...``
(through ``python -m torch.distributed.run``, which is torchrun, with this interpreter). Each
rank times every size with the shared protocol; the per-run time is the slowest rank's (as
nccl-tests reports). Rank 0 writes a :class:`BenchReport` to ``--out``.

Sizes and bandwidths follow nccl-tests (doc/PERFORMANCE.md): ``S`` is the all_reduce buffer,
the all_gather output and the reduce_scatter input (the whole array, count x sizeof x n);
``algbw = S / t``; ``busbw = algbw x 2(n-1)/n`` for all_reduce and ``x (n-1)/n`` for all_gather
and reduce_scatter. NCCL on GPUs, gloo on the CPU. ``NCCL_NVLS_ENABLE=0`` is set in the launched
environment: with NVLink SHARP busbw no longer corresponds to the bandwidth on the wire.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from dataclasses import replace
from pathlib import Path

from gpudoctor.bench.copy import size_label
from gpudoctor.bench.links import nvlink_gbs, pcie_gbs
from gpudoctor.bench.protocol import Protocol, median_ms, spread, time_gpu, time_host
from gpudoctor.core.process_group import run_process_group
from gpudoctor.records.base import read_json, write_json
from gpudoctor.records.bench import KIND_BENCH, BenchReport, BenchResult, BenchSkip, LinkState

from gpudoctor.records.units import MIB as MiB

OPS = ("all_reduce", "all_gather", "reduce_scatter")
GPU_SIZES = tuple(MiB << k for k in range(12))  # 1 MiB .. 2 GiB, x2
GPU_QUICK_SIZES = tuple(MiB << k for k in range(0, 11, 2))  # 1 MiB .. 1 GiB, x4
CPU_SIZES = (MiB, 4 * MiB, 16 * MiB)
CPU_QUICK_SIZES = (MiB, 4 * MiB)
GPU_PROTOCOL = Protocol(warmup=5, repeats=20)
QUICK_PROTOCOL = Protocol(warmup=2, repeats=8)
CPU_PROTOCOL = Protocol(warmup=2, repeats=5)
ELEMENT_BYTES = 4  # float32, as nccl-tests' default


def bus_factor(op: str, n: int) -> float:
    """nccl-tests bus-bandwidth factor: busbw = algbw x this."""
    if n < 1:
        raise ValueError(f"world size {n} must be at least 1")
    if op == "all_reduce":
        return 2.0 * (n - 1) / n
    if op in ("all_gather", "reduce_scatter"):
        return (n - 1) / n
    raise ValueError(f"collective {op!r} is not one of {', '.join(OPS)}")


def _collective(op: str, nbytes: int, n: int, device, group=None):
    """Buffers for one size and the call; ``nbytes`` rounded down to whole elements per rank."""
    import torch
    import torch.distributed as dist

    count = max(nbytes // (ELEMENT_BYTES * n), 1) * n  # total elements, divisible by n
    if op == "all_reduce":
        buf = torch.randn(count, device=device)
        return count * ELEMENT_BYTES, lambda: dist.all_reduce(buf, group=group)
    whole = torch.randn(count, device=device)
    part = torch.randn(count // n, device=device)
    if op == "all_gather":
        gather = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
        return count * ELEMENT_BYTES, lambda: gather(whole, part, group=group)
    scatter = getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor
    return count * ELEMENT_BYTES, lambda: scatter(part, whole, group=group)


def _slowest_rank(times: list[float], device, group=None) -> list[float]:
    """Per-run time of the slowest rank (a collective finishes when its last rank does)."""
    import torch
    import torch.distributed as dist

    t = torch.tensor(times, dtype=torch.float64, device=device)
    dist.all_reduce(t, op=dist.ReduceOp.MAX, group=group)
    return t.tolist()  # sync point: copies the maxima back to the host


def measure(op: str, nbytes: int, *, quick: bool, device, group=None) -> BenchResult:
    """Time one collective at one size on this rank (every rank must call it in the same order).

    ``group``: the process group to run over (default: all ranks); ``check --cluster`` measures
    one rank per node, then the ranks of each node.
    """
    import torch.distributed as dist

    n = dist.get_world_size(group)
    total, call = _collective(op, nbytes, n, device, group)
    on_gpu = device.type == "cuda"
    if on_gpu:
        times = time_gpu(call, QUICK_PROTOCOL if quick else GPU_PROTOCOL)
    else:
        times = time_host(call, CPU_PROTOCOL)
    times = _slowest_rank(times, device, group)
    factor = bus_factor(op, n)
    busbw = spread([total / (ms / 1000.0) / 1e9 * factor for ms in times if ms > 0])
    t_ms = median_ms(times)
    backend = dist.get_backend(group)
    return BenchResult(
        section="collectives",
        op=op,
        dtype="fp32",
        size=size_label(total),
        size_bytes=total,
        device=f"{n} x {'cuda' if on_gpu else 'cpu'} ({backend})",
        unit="GB/s",
        median=busbw.median,
        p10=busbw.p10,
        p90=busbw.p90,
        repeats=busbw.count,
        time_ms=t_ms,
        algbw_gbs=total / (t_ms / 1000.0) / 1e9,
        note=f"busbw = algbw x {factor:g} (nccl-tests)",
    )


def link_peak(links: tuple[LinkState, ...], capability: tuple[int, int] | None) -> tuple[float | None, str]:
    """The link a collective between these GPUs runs over, in GB/s per direction, and its name.

    NVLink when rank 0's GPU has active links; otherwise PCIe (peer-to-peer or through the host).
    """
    if not links:
        return None, ""
    first = links[0]
    nv = nvlink_gbs(first.nvlink_active_links, capability)
    if nv is not None:
        return nv, f"NVLink, {first.nvlink_active_links} active links, one direction"
    pcie = pcie_gbs(first.pcie_gen_max, first.pcie_width_max)
    if pcie is not None:
        how = "peer-to-peer" if first.p2p_peers else "through host memory (no P2P)"
        return pcie, f"PCIe Gen{first.pcie_gen_max} x{first.pcie_width_max} {how}, one direction"
    return None, ""


def attach_peak(results: list[BenchResult], peak: float | None, source: str) -> list[BenchResult]:
    """Set the link bandwidth as the reference of every GPU collective result."""
    if peak is None:
        return results
    return [
        replace(r, peak=peak, peak_source=source, fraction_of_peak=(r.median or 0.0) / peak)
        if "cuda" in r.device else r
        for r in results
    ]


def launch_collectives(
    nproc: int,
    *,
    ops: tuple[str, ...] = OPS,
    sizes: tuple[int, ...] | None = None,
    quick: bool = False,
    timeout_s: float = 300.0,
) -> tuple[list[BenchResult], list[BenchSkip]]:
    """Run this module under torchrun with ``nproc`` ranks and read rank 0's results back.

    A failed or timed-out launch is returned as a skip with the tail of its output, never raised.
    """
    if nproc < 2:
        raise ValueError(f"--nproc {nproc}: a collective needs at least 2 processes")
    with tempfile.TemporaryDirectory(prefix="gpudoctor-bench-") as tmp:
        out = Path(tmp) / "collectives.json"
        cmd = [
            sys.executable, "-m", "torch.distributed.run", "--standalone",
            "--nproc_per_node", str(nproc),
            "-m", "gpudoctor.bench.collectives",
            "--out", str(out), "--ops", ",".join(ops),
        ]
        if sizes:
            cmd += ["--sizes", ",".join(str(s) for s in sizes)]
        if quick:
            cmd.append("--quick")
        env = dict(os.environ)
        env["NCCL_NVLS_ENABLE"] = "0"  # busbw must reflect the wire (nccl-tests#212); NVLS stays off
        src = str(Path(__file__).resolve().parents[2])
        env["PYTHONPATH"] = src + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
        env.setdefault("OMP_NUM_THREADS", "1")
        try:
            # its own process group, killed whole on a timeout: torchrun's workers hold the GPUs
            proc = run_process_group(cmd, env=env, timeout_s=timeout_s)
        except subprocess.TimeoutExpired:
            return [], [BenchSkip(section="collectives", what="torchrun", reason=f"timed out after {timeout_s:.0f} s")]
        if proc.returncode != 0 or not out.exists():
            tail = " | ".join((proc.stderr or proc.stdout or "").strip().splitlines()[-3:])
            return [], [BenchSkip(section="collectives", what="torchrun", reason=f"exit {proc.returncode}: {tail[-400:]}")]
        report = read_json(out, BenchReport, kind=KIND_BENCH)
    return list(report.results), list(report.skipped)


def _worker(args: argparse.Namespace) -> int:
    import torch

    from gpudoctor.core.device import select_device
    from gpudoctor.core.dist import destroy_distributed, dist_env, init_distributed

    env = dist_env()
    device = select_device("auto", env)
    init_distributed(env, device, timeout_s=args.timeout)
    results, skipped = [], []
    finished = False
    try:
        for op in args.ops.split(","):
            for nbytes in _sizes(args, device):
                try:
                    results.append(measure(op, nbytes, quick=args.quick, device=device))
                except (RuntimeError, NotImplementedError, ValueError) as exc:
                    # every rank hits the same unsupported op and skips it together
                    skipped.append(BenchSkip(section="collectives", what=op, reason=str(exc).splitlines()[0][:200]))
                    break
                finally:
                    if device.type == "cuda":
                        torch.cuda.empty_cache()
        if env.is_main:
            report = BenchReport(
                device_name=torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
                gpu_count=torch.cuda.device_count(),
                torch_version=torch.__version__,
                results=tuple(results),
                skipped=tuple(skipped),
            )
            write_json(Path(args.out), report, kind=KIND_BENCH)
        finished = True
    finally:
        destroy_distributed(synchronize=finished)
    return 0


def _sizes(args: argparse.Namespace, device) -> tuple[int, ...]:
    if args.sizes:
        return tuple(int(s) for s in args.sizes.split(","))
    if device.type == "cuda":
        return GPU_QUICK_SIZES if args.quick else GPU_SIZES
    return CPU_QUICK_SIZES if args.quick else CPU_SIZES


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="gpudoctor.bench.collectives", description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, help="where rank 0 writes the JSON results")
    parser.add_argument("--ops", default=",".join(OPS), help="comma list of " + ", ".join(OPS))
    parser.add_argument("--sizes", default="", help="comma list of sizes in bytes")
    parser.add_argument("--quick", action="store_true", help="fewer sizes and repeats")
    parser.add_argument("--timeout", type=float, default=300.0, help="process-group timeout, seconds")
    return _worker(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
