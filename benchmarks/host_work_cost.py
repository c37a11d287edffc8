"""Cost of the host-work probes on normal steps: the stack sampler's thread, the collection
timer, the step's hand-over and the ``torch.save`` wrapper.

    PYTHONPATH=src python benchmarks/host_work_cost.py [--json] [--steps N] [--rounds R]

CPU only, in this process (it plays the training loop: a step of ``--step-ms`` of Python and
tensor work, then the boundary's bookkeeping). ``sampler``: the mean step with the sampler thread
running against without it, in interleaved rounds (best round of each, and the medians), and how often the
thread woke, the CPU time it used (its schedstat, a share of the wall time: the steadiest
figure on a shared machine), and whether it sampled (a normal step ends before its deadline: no
sample). The others are
microseconds per call, best of several repeats.
"""

from __future__ import annotations

import argparse
import gc
import io
import json
import statistics
import sys
import time


def _best_us(fn, n: int, repeats: int = 5) -> float:
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        for _ in range(n):
            fn()
        best = min(best, (time.perf_counter() - t0) / n)
    return best * 1e6


def _sampler_cpu_s() -> float | None:
    """CPU seconds the sampler thread has run (Linux schedstat, nanoseconds), or ``None``."""
    import threading

    thread = next((t for t in threading.enumerate() if t.name == "gpudoctor-host-sampler"), None)
    if thread is None or thread.native_id is None:
        return None
    try:
        with open(f"/proc/self/task/{thread.native_id}/schedstat") as f:
            return int(f.read().split()[0]) / 1e9
    except OSError:
        return None


def _work(torch, a, iters: int):
    for _ in range(iters):
        a = torch.tanh(a @ a)
        [i * 2 for i in range(50)]  # some Python objects, as a loop makes
    return a


def _calibrate(torch, step_ms: float) -> int:
    """Iterations of the step's work that take about ``step_ms`` here."""
    a = torch.randn(64, 64)
    t0 = time.perf_counter()
    _work(torch, a, 200)
    per = (time.perf_counter() - t0) / 200
    return max(1, int(step_ms / 1000.0 / per))


def _steps(torch, S, end_step, steps: int, iters: int) -> float:
    """Mean seconds of ``steps`` steps of ``iters`` iterations of work and the boundary."""
    a = torch.randn(64, 64)
    t_start = time.perf_counter()
    for _ in range(steps):
        _work(torch, a, iters)
        fields: dict = {}
        now = time.perf_counter()
        end_step(fields, now - S.t_last)
        S.step += 1
        S.t_last = time.perf_counter()
    return (time.perf_counter() - t_start) / steps


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--step-ms", type=float, default=2.0)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()

    import torch

    from gpudoctor.collectors.instrument import host_sampler, host_work
    from gpudoctor.collectors.instrument.state import S

    torch.set_num_threads(1)
    S.t_last = time.perf_counter()
    iters = _calibrate(torch, args.step_ms)
    plain, sampled, cpu = [], [], []
    _steps(torch, S, host_work.end_step, args.steps, iters)  # warm up, and fill the recent steps
    for r in range(args.rounds):  # interleaved: the thread paused between the rounds
        S.finished = True
        time.sleep(0.6)  # longer than the sampler's longest sleep: it has left
        S.host.sampler_pid = 0
        plain.append(_steps(torch, S, host_work.end_step, args.steps, iters))
        S.finished = False
        host_sampler.start()
        wakes0, cpu0 = S.host.wakes, _sampler_cpu_s()
        sampled.append(_steps(torch, S, host_work.end_step, args.steps, iters))
        wakes, cpu1 = S.host.wakes - wakes0, _sampler_cpu_s()
        cpu.append(None if cpu0 is None or cpu1 is None else (cpu1 - cpu0) / (args.steps * sampled[-1]))
    frames = len(S.host.frames)
    base, with_thread = min(plain), min(sampled)
    end_step_us = _best_us(lambda: host_work.end_step({}, 0.002), 20000)
    host_work.install(torch)
    calls = {"gc.collect(0) with the timer": _best_us(lambda: gc.collect(0), 2000)}
    gc.callbacks.remove(host_work._gc_callback)
    calls["gc.collect(0) without it"] = _best_us(lambda: gc.collect(0), 2000)
    state = {"w": torch.randn(256)}
    calls["torch.save (1 KiB, BytesIO), wrapped"] = _best_us(lambda: torch.save(state, io.BytesIO()), 500)
    calls["torch.save (1 KiB, BytesIO), plain"] = _best_us(lambda: torch.save.__wrapped__(state, io.BytesIO()), 500)
    out = {
        "step_ms": args.step_ms, "steps_per_round": args.steps, "rounds": args.rounds,
        "mean_step_ms_without_sampler": round(base * 1000, 4),
        "mean_step_ms_without_sampler_median": round(statistics.median(plain) * 1000, 4),
        "mean_step_ms_with_sampler_best": round(with_thread * 1000, 4),
        "mean_step_ms_with_sampler_median": round(statistics.median(sampled) * 1000, 4),
        "sampler_overhead_frac": round(with_thread / base - 1.0, 5),
        "sampler_wakes_last_round": wakes,
        "sampler_thread_cpu_frac_median": (round(statistics.median(c for c in cpu if c is not None), 6)
                                           if any(c is not None for c in cpu) else None), "sampler_frames_left": frames,
        "end_step_us": round(end_step_us, 3),
        "calls_us": {k: round(v, 3) for k, v in calls.items()},
    }
    if args.json:
        print(json.dumps(out, indent=2))
    else:
        for k, v in out.items():
            print(f"{k:40} {v}")
    S.finished = True
    return 0


if __name__ == "__main__":
    sys.exit(main())
