"""Run the selected benchmarks and gather one :class:`BenchReport` (verdicts are set afterwards by
``gpudoctor.analysis.bench_rules.judge``).

On a GPU: matmul per dtype, copies, and collectives over NCCL when 2+ GPUs are visible. On a
CPU-only machine: CPU matmul (fp32, bf16), a host memcpy and a 2-process gloo all_reduce, with
every GPU-only part listed as skipped and why.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from dataclasses import dataclass, replace

from gpudoctor.errors import GpuDoctorUserError
from gpudoctor.records.bench import BenchReport, BenchResult, BenchSkip, LinkState

SECTIONS = ("matmul", "copy", "collectives", "loader")
DTYPES = ("fp32", "tf32", "bf16", "fp16", "fp8")
_UNITS = {"": 1, "b": 1, "k": 1 << 10, "kb": 1000, "kib": 1 << 10, "m": 1 << 20, "mb": 10**6,
          "mib": 1 << 20, "g": 1 << 30, "gb": 10**9, "gib": 1 << 30}


@dataclass(frozen=True, kw_only=True)
class BenchOptions:
    """What ``gpudoctor bench`` runs.

    Attributes:
        what: one of :data:`SECTIONS` or ``"all"``.
        dtypes: matmul dtypes; empty = every one this device supports.
        matmul_sizes: square matmul sizes N; empty = the default.
        byte_sizes: buffer sizes in bytes for copies and collectives; empty = the defaults.
        nproc: processes for collectives; ``None`` = the GPU count (2 gloo processes on a CPU).
        quick: fewer sizes and repeats.
        dataset: loader benchmark dataset (``module:function`` or ``script.py[:name]``).
        workers: ``num_workers`` values for the loader benchmark.
        batch_size: loader batch size.
    """

    what: str = "all"
    dtypes: tuple[str, ...] = ()
    matmul_sizes: tuple[int, ...] = ()
    byte_sizes: tuple[int, ...] = ()
    nproc: int | None = None
    quick: bool = False
    dataset: str = ""
    workers: tuple[int, ...] = (0, 2, 4)
    batch_size: int = 64

    def __post_init__(self) -> None:
        if self.what not in (*SECTIONS, "all"):
            raise ValueError(f"bench {self.what!r}: choose one of {', '.join(SECTIONS)} or all")
        unknown = [d for d in self.dtypes if d not in DTYPES]
        if unknown:
            raise ValueError(f"--dtypes: {', '.join(unknown)} unknown; choose from {', '.join(DTYPES)}")
        if self.batch_size < 1:
            raise ValueError(f"--batch-size {self.batch_size} must be at least 1")
        if self.nproc is not None and self.nproc < 2:
            raise ValueError(f"--nproc {self.nproc}: collectives need at least 2 processes")


def parse_sizes(text: str) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """Split ``--sizes`` into matmul sizes (bare numbers) and byte sizes (numbers with a unit).

    ``"4096,8192"`` -> matmul N; ``"1M,256MiB,1G"`` -> bytes (K/M/G are binary, KB/MB/GB decimal).
    """
    matmul, nbytes = [], []
    for item in filter(None, (p.strip() for p in text.split(","))):
        match = re.fullmatch(r"(\d+)\s*([a-zA-Z]*)", item)
        unit = match.group(2).lower() if match else ""
        if not match or unit not in _UNITS:
            raise GpuDoctorUserError(
                f"--sizes: {item!r} is not a size; give matmul N as a bare number (8192) and "
                "buffer sizes with a unit (1M, 256MiB, 1G)"
            )
        value = int(match.group(1))
        if value <= 0:
            raise GpuDoctorUserError(f"--sizes: {item!r} must be positive")
        (nbytes if match.group(2) else matmul).append(value * _UNITS[unit])
    return tuple(matmul), tuple(nbytes)


def _merge_links(idle: tuple[LinkState, ...], compute: LinkState | None, copy: LinkState | None):
    """GPU 0's evidence: PCIe as read under copy load, clocks/power as read under matmul load."""
    if not idle:
        return idle
    first = idle[0]
    if copy is not None:
        first = replace(first, pcie_gen_current=copy.pcie_gen_current, pcie_width_current=copy.pcie_width_current)
    if compute is not None:
        first = replace(
            first, sm_clock_mhz=compute.sm_clock_mhz, throttle_reasons=compute.throttle_reasons,
            power_limit_w=compute.power_limit_w,
        )
    return (first, *idle[1:])


def run_bench(options: BenchOptions, progress: Callable[[str], None] | None = None) -> BenchReport:
    """Run the benchmarks ``options`` selects; never raises for a benchmark that cannot run.

    ``progress`` (optional) receives one line as each section starts (the CLI prints it on stderr).
    Bad input (``--nproc`` above the GPU count, an unknown dataset) raises
    :class:`GpuDoctorUserError` before anything is measured.
    """
    import torch

    from gpudoctor.bench.collectives import OPS, attach_peak, launch_collectives, link_peak
    from gpudoctor.bench.copy import run_copy
    from gpudoctor.bench.links import nccl_env, probe_link, probe_links
    from gpudoctor.bench.matmul import run_matmul

    say = progress or (lambda line: None)
    start = time.perf_counter()
    wanted = SECTIONS if options.what == "all" else (options.what,)
    gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    device = torch.device("cuda", 0) if gpus else torch.device("cpu")
    results: list[BenchResult] = []
    skipped: list[BenchSkip] = []
    compute_probe = copy_probe = None
    probe = (lambda: probe_link(0)) if gpus else None
    nproc = options.nproc or (gpus if gpus >= 2 else (2 if not gpus else 0))
    if gpus and nproc > gpus and "collectives" in wanted:  # checked before anything runs
        raise GpuDoctorUserError(f"--nproc {nproc} but only {gpus} GPUs are visible; use --nproc {gpus} or less")
    dataset = None
    if "loader" in wanted and options.dataset:  # resolved first: a bad name fails before anything runs
        from gpudoctor.bench.loader import load_dataset, run_loader

        dataset = load_dataset(options.dataset)
    if not gpus:
        skipped.append(BenchSkip(section="all", what="GPU benchmarks", reason="no CUDA GPU visible: CPU figures only"))
    if "matmul" in wanted:
        say(f"bench: matmul on {device} ...")
        r, s, compute_probe = run_matmul(
            device, dtypes=options.dtypes or None, sizes=options.matmul_sizes or None, during=probe
        )
        results += r
        skipped += s
    if "copy" in wanted:
        say("bench: copies ...")
        r, copy_probe = run_copy(device, sizes=options.byte_sizes or None, quick=options.quick, during=probe)
        results += r
    links = _merge_links(probe_links(gpus), compute_probe, copy_probe) if gpus else ()
    if "collectives" in wanted:
        if nproc < 2:
            skipped.append(BenchSkip(
                section="collectives", what="all_reduce, all_gather, reduce_scatter",
                reason=f"{gpus} GPU visible: collectives need 2 or more GPUs",
            ))
        else:
            # On a CPU `bench all` keeps to all_reduce: gloo is slow and the figure is only a sanity check.
            ops = OPS if (gpus or options.what == "collectives") else ("all_reduce",)
            if ops != OPS:
                skipped.append(BenchSkip(
                    section="collectives", what="all_gather, reduce_scatter",
                    reason="CPU (gloo): only all_reduce in `bench all`; run `gpudoctor bench collectives` for all three",
                ))
            say(f"bench: {', '.join(ops)} with {nproc} processes under torchrun ...")
            r, s = launch_collectives(
                nproc, ops=ops, sizes=options.byte_sizes or None, quick=options.quick, timeout_s=180.0
            )
            if gpus:
                capability = torch.cuda.get_device_capability(0)
                r = attach_peak(r, *link_peak(links, capability))
            results += r
            skipped += s
    if "loader" in wanted:
        if not options.dataset:
            skipped.append(BenchSkip(
                section="loader", what="DataLoader throughput",
                reason="no dataset given: pass --dataset module:function or --dataset script.py",
            ))
        else:
            say(f"bench: DataLoader with workers {options.workers} ...")
            try:
                results += run_loader(
                    dataset, workers=options.workers, batch_size=options.batch_size, pin_memory=bool(gpus)
                )
            except GpuDoctorUserError as exc:
                if options.what == "loader":
                    raise
                skipped.append(BenchSkip(section="loader", what="DataLoader throughput", reason=str(exc)))
    return BenchReport(
        device_name=torch.cuda.get_device_name(0) if gpus else "cpu",
        gpu_count=gpus,
        torch_version=torch.__version__,
        results=tuple(results),
        skipped=tuple(skipped),
        links=links,
        nccl_env=nccl_env() or None,
        duration_s=time.perf_counter() - start,
    )
