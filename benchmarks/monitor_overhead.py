"""What does watching the GPU cost? The bars of issue 3, measured on and off in one run.

    PYTHONPATH=src python benchmarks/monitor_overhead.py --out benchmarks/results/monitor_overhead.json

1. Slowdown of GPU work running beside the sampler: two loops timed with CUDA events -- a bf16
   matmul loop (big kernels) and a launch-bound loop of small ops (a ResNet-ish stack of tiny
   convolutions, where any stolen CPU time shows) -- in interleaved off/on phases (ABBA order
   against drift). Bar: < 0.5 % slower with the sampler at 10 Hz.
2. CPU cost of the sampler thread: its own thread CPU clock over every "on" phase divided by the
   wall time of those phases. Bar: < 1 % of one core at 10 Hz.
3. Memory of one hour at 10 Hz: the ring buffer's real samples measured object by object
   (shared objects counted once) and, separately, tracemalloc over N fresh samples; each
   extrapolated to 36000 samples. Bar: < 50 MB.

The sampler's own CPU and rate are measured over the timed window of each "on" phase only:
the thread's CPU clock and its sample count at the window's start and end (the first sample,
with NVML's warm-up, falls before the window).

``--cpu-only`` needs no GPU: the sampler's Python-side cost per sample against the fake NVML of
``tests/unit/monitor/conftest.py`` (so the driver's own cost is NOT in it), with real psutil
command-line lookups for two GPU processes (this process, and a pid of another namespace, as in a
container); NVML calls per sample; and the threaded loop's achieved rate and CPU at 10 Hz with a
fake PCIe counter that blocks 20 ms per read, as the driver's does. ``--label`` names the run in
``--out`` (runs of other labels are kept), so a before/after pair lands in one file::

    PYTHONPATH=src python benchmarks/monitor_overhead.py --cpu-only --label after \
        --out benchmarks/results/monitor_overhead_cpu.json
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import time
import tracemalloc
from collections import deque
from pathlib import Path

HOUR_AT_10HZ = 36000


def deep_size(root: object) -> int:
    """Bytes held by ``root`` and everything it references, each object counted once."""
    seen: set[int] = set()
    stack = [root]
    total = 0
    while stack:
        obj = stack.pop()
        if id(obj) in seen or obj is None or isinstance(obj, bool):
            continue
        seen.add(id(obj))
        total += sys.getsizeof(obj)
        if isinstance(obj, dict):
            stack.extend(obj.keys())
            stack.extend(obj.values())
        elif isinstance(obj, (list, tuple, deque, set, frozenset)):
            stack.extend(obj)
        elif hasattr(obj, "__slots__"):
            stack.extend(getattr(obj, name) for name in obj.__slots__ if hasattr(obj, name))
    return total


def nvml_call_costs(nv, index: int = 0, calls: int = 30) -> dict:
    """Thread CPU and wall time per call of each NVML function the sampler uses, on GPU ``index``.

    Says where a sample's CPU time goes on a real driver (each call is an ioctl; the PCIe
    counter waits out a 20 ms window). A call the device refuses is recorded as its error.
    """
    nv.nvmlInit()
    try:
        h = nv.nvmlDeviceGetHandleByIndex(index)
        probes = {
            "nvmlDeviceGetUtilizationRates": lambda: nv.nvmlDeviceGetUtilizationRates(h),
            "nvmlDeviceGetMemoryInfo": lambda: nv.nvmlDeviceGetMemoryInfo(h),
            "nvmlDeviceGetTemperature": lambda: nv.nvmlDeviceGetTemperature(
                h, nv.NVML_TEMPERATURE_GPU),
            "nvmlDeviceGetPowerUsage": lambda: nv.nvmlDeviceGetPowerUsage(h),
            "nvmlDeviceGetEnforcedPowerLimit": lambda: nv.nvmlDeviceGetEnforcedPowerLimit(h),
            "nvmlDeviceGetClockInfo(SM)": lambda: nv.nvmlDeviceGetClockInfo(h, nv.NVML_CLOCK_SM),
            "nvmlDeviceGetCurrentClocksEventReasons": lambda: getattr(
                nv, "nvmlDeviceGetCurrentClocksEventReasons",
                nv.nvmlDeviceGetCurrentClocksThrottleReasons)(h),
            "nvmlDeviceGetTotalEccErrors": lambda: nv.nvmlDeviceGetTotalEccErrors(
                h, nv.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, nv.NVML_VOLATILE_ECC),
            "nvmlDeviceGetComputeRunningProcesses": lambda: (
                nv.nvmlDeviceGetComputeRunningProcesses(h)),
            "nvmlDeviceGetPcieThroughput(RX)": lambda: nv.nvmlDeviceGetPcieThroughput(
                h, nv.NVML_PCIE_UTIL_RX_BYTES),
        }
        out: dict = {}
        for name, fn in probes.items():
            try:
                fn()  # first call outside the timing
                c0, w0 = time.thread_time(), time.perf_counter()
                for _ in range(calls):
                    fn()
                out[name] = {"cpu_us_per_call": (time.thread_time() - c0) / calls * 1e6,
                             "wall_us_per_call": (time.perf_counter() - w0) / calls * 1e6}
            except Exception as exc:  # noqa: BLE001 - a refused metric is a result too
                out[name] = {"error": f"{type(exc).__name__}: {exc}"}
        return out
    finally:
        nv.nvmlShutdown()


def _loops(torch, device):
    """Two GPU workloads: (name, step function, iterations per ~phase)."""
    a = torch.randn(8192, 8192, device=device, dtype=torch.bfloat16)
    b = torch.randn(8192, 8192, device=device, dtype=torch.bfloat16)

    def matmul():
        torch.matmul(a, b)

    layers = [torch.nn.Conv2d(32, 32, 3, padding=1) for _ in range(8)]
    net = torch.nn.Sequential(*[m for layer in layers for m in (layer, torch.nn.BatchNorm2d(32),
                                                                torch.nn.ReLU())]).to(device)
    x = torch.randn(8, 32, 16, 16, device=device)
    opt = torch.optim.SGD(net.parameters(), lr=1e-3)

    def small_ops():
        opt.zero_grad(set_to_none=True)
        net(x).square().mean().backward()
        opt.step()

    return [("bf16 matmul 8192", matmul), ("small-kernel conv net fwd+bwd", small_ops)]


def _time(torch, step, iters: int) -> float:
    """Milliseconds per iteration, timed with CUDA events."""
    start = torch.cuda.Event(enable_timing=True)
    end = torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(iters):
        step()
    end.record()
    end.synchronize()  # host-device sync point: wait for the phase's last kernel
    return start.elapsed_time(end) / iters


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--interval", type=float, default=0.1, help="sampler interval (s)")
    ap.add_argument("--repeats", type=int, default=6, help="off/on phase pairs per workload")
    ap.add_argument("--phase-s", type=float, default=1.25, help="seconds per phase")
    ap.add_argument("--mem-samples", type=int, default=1000, help="samples for tracemalloc")
    ap.add_argument("--out", type=Path, default=None,
                    help="JSON to write (default benchmarks/results/monitor_overhead.json, "
                         "or monitor_overhead_cpu.json with --cpu-only)")
    ap.add_argument("--cpu-only", action="store_true",
                    help="no GPU: the sampler's CPU side against the fake NVML of the unit tests")
    ap.add_argument("--label", default="run", help="--cpu-only: the name of this run in --out")
    ap.add_argument("--samples", type=int, default=3000, help="--cpu-only: samples timed")
    ap.add_argument("--thread-s", type=float, default=3.0,
                    help="--cpu-only: seconds of threaded sampling per GPU count")
    args = ap.parse_args()
    if args.cpu_only:
        from monitor_overhead_cpu import cpu_only

        return cpu_only(args)
    if args.out is None:
        args.out = Path("benchmarks/results/monitor_overhead.json")

    import torch

    from gpudoctor.collectors.nvml import GpuSampler

    if not torch.cuda.is_available():
        print("no CUDA GPU: this benchmark needs one (run it on the GPU machine)", file=sys.stderr)
        return 2
    probe = GpuSampler(interval=args.interval, indices=[0])
    if not probe.available:
        print(f"NVML unavailable: {probe.unavailable_reason}", file=sys.stderr)
        return 2
    device = torch.device("cuda", 0)
    torch.cuda.set_device(device)
    results: dict = {
        "command": " ".join([Path(sys.executable).name, *sys.argv]),
        "gpu": torch.cuda.get_device_name(device),
        "torch": torch.__version__,
        "python": platform.python_version(),
        "interval_s": args.interval,
        "repeats": args.repeats,
        "phase_s": args.phase_s,
        "workloads": [],
    }
    on_wall = on_cpu = life_cpu = life_wall = 0.0
    on_samples = 0
    for name, step in _loops(torch, device):
        for _ in range(20):
            step()
        torch.cuda.synchronize()  # sync point: warm-up done before calibrating
        t0 = time.perf_counter()
        n = 0
        while time.perf_counter() - t0 < 0.5:
            step()
            n += 1
        torch.cuda.synchronize()  # sync point: calibration
        iters = max(10, int(n * args.phase_s / (time.perf_counter() - t0)))
        off, on = [], []
        for r in range(args.repeats):
            for with_sampler in ((False, True) if r % 2 == 0 else (True, False)):
                if not with_sampler:
                    off.append(_time(torch, step, iters))
                    continue
                sampler = GpuSampler(interval=args.interval, indices=[0]).start()
                time.sleep(args.interval)  # the first sample (NVML warm-up) is outside the timing
                before_n = len(sampler.samples())
                before_cpu = sampler.cpu_time_s()
                w0 = time.perf_counter()
                on.append(_time(torch, step, iters))
                wall = time.perf_counter() - w0
                taken = len(sampler.samples()) - before_n
                cpu = sampler.cpu_time_s() - before_cpu  # thread CPU, read after each sample
                sampler.stop()
                # numerator and denominator over the same window (the first run of this bench
                # added the warm-up interval to the wall time but not its samples: 9.5/s)
                on_wall += wall
                on_cpu += cpu
                on_samples += taken
                # the first run's figure, for comparison: the whole thread (its start-up sample
                # included) over the window plus the warm-up interval
                life_cpu += sampler.cpu_time_s()
                life_wall += wall + args.interval
        ratios = [b / a for a, b in zip(off, on)]
        results["workloads"].append({
            "name": name,
            "iters_per_phase": iters,
            "off_ms_per_iter": off,
            "on_ms_per_iter": on,
            "slowdown_pct_median_of_pairs": 100 * (statistics.median(ratios) - 1),
            "slowdown_pct_of_medians": 100 * (statistics.median(on) / statistics.median(off) - 1),
        })
    import pynvml

    results["nvml_call_costs_gpu0"] = nvml_call_costs(pynvml)
    results["sampler_cpu_pct_of_one_core"] = 100 * on_cpu / on_wall
    results["sampler_cpu_pct_incl_startup"] = 100 * life_cpu / life_wall
    results["sampler_on_wall_s"] = on_wall
    results["samples_per_s_achieved"] = on_samples / on_wall

    ring = GpuSampler(interval=args.interval, indices=[0], maxlen=HOUR_AT_10HZ)
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < 2.0:  # real samples, PCIe included
        ring.sample_once()
    kept = ring.samples()
    per_sample = deep_size(kept) / len(kept)
    results["ring_bytes_per_sample_deep"] = per_sample
    results["ring_hour_at_10hz_mb_deep"] = per_sample * HOUR_AT_10HZ / 1e6
    results["ring_samples_measured"] = len(kept)
    ring.stop()

    fresh = GpuSampler(interval=args.interval, indices=[0], maxlen=HOUR_AT_10HZ, pcie=False)
    fresh.sample_once()
    tracemalloc.start()
    base = tracemalloc.get_traced_memory()[0]
    for _ in range(args.mem_samples):
        fresh.sample_once()
    grown = tracemalloc.get_traced_memory()[0] - base
    tracemalloc.stop()
    fresh.stop()
    # PCIe was off here (each read waits ~20 ms); add its two floats per sample back in
    per_sample_tm = grown / args.mem_samples + 2 * sys.getsizeof(1.5)
    results["tracemalloc_bytes_per_sample"] = per_sample_tm
    results["tracemalloc_hour_at_10hz_mb"] = per_sample_tm * HOUR_AT_10HZ / 1e6

    worst_slowdown = max(w["slowdown_pct_median_of_pairs"] for w in results["workloads"])
    worst_mb = max(results["ring_hour_at_10hz_mb_deep"], results["tracemalloc_hour_at_10hz_mb"])
    results["bars"] = {
        "cpu_lt_1pct_of_a_core": results["sampler_cpu_pct_of_one_core"] < 1.0,
        "gpu_loop_slowdown_lt_0.5pct": worst_slowdown < 0.5,
        "hour_at_10hz_lt_50mb": worst_mb < 50.0,
    }

    rows = [("GPU", results["gpu"]), ("sampler interval", f"{args.interval} s")]
    for w in results["workloads"]:
        rows.append((
            f"{w['name']} ms/iter off -> on",
            f"{statistics.median(w['off_ms_per_iter']):.4f} -> "
            f"{statistics.median(w['on_ms_per_iter']):.4f} "
            f"({w['slowdown_pct_median_of_pairs']:+.3f} % median of {args.repeats} pairs)",
        ))
    rows += [
        ("sampler CPU, % of one core", f"{results['sampler_cpu_pct_of_one_core']:.3f} % "
         f"({results['sampler_cpu_pct_incl_startup']:.3f} % with start-up samples)"),
        ("samples/s achieved", f"{results['samples_per_s_achieved']:.2f}"),
        ("ring: bytes/sample (deep) -> 1 h", f"{per_sample:.0f} B -> "
                                             f"{results['ring_hour_at_10hz_mb_deep']:.1f} MB"),
        ("tracemalloc: bytes/sample -> 1 h", f"{per_sample_tm:.0f} B -> "
                                             f"{results['tracemalloc_hour_at_10hz_mb']:.1f} MB"),
    ]
    for name, cost in results["nvml_call_costs_gpu0"].items():
        rows.append((f"  {name}", cost.get("error") or f"{cost['cpu_us_per_call']:.1f} us CPU, "
                                                       f"{cost['wall_us_per_call']:.1f} us wall"))
    rows += [(f"bar {k}", "PASS" if v else "FAIL") for k, v in results["bars"].items()]
    width = max(len(k) for k, _ in rows)
    for k, v in rows:
        print(f"{k:<{width}}  {v}")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=2) + "\n")
    print(f"wrote {args.out}")
    return 0 if all(results["bars"].values()) else 1


if __name__ == "__main__":
    sys.exit(main())
