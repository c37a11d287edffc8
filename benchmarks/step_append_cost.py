"""Cost of writing one step record the way ``gpudoctor run``'s probes do, on this machine's CPU.

Times N appends of a typical GPU step record (allocator counters included) to a file in a temp
directory: the record encoded (``stepfile.step_line``) and appended with one ``os.write`` on an
``O_APPEND`` descriptor (``stepfile.StepFile``) — the probes write each step once at its boundary
and, on a GPU, once more when its late values (GPU time, loss) are in. For comparison, the
previous path: ``records.base.dumps`` of a ``StepRecord`` through a flushed ``JsonlWriter``.

    python benchmarks/step_append_cost.py [N]
"""

from __future__ import annotations

import statistics
import sys
import tempfile
import time
from pathlib import Path

from gpudoctor.collectors.instrument.stepfile import StepFile, step_line
from gpudoctor.core.memory import stats_from_mapping
from gpudoctor.records.base import JsonlWriter, dumps, to_dict
from gpudoctor.records.step import StepRecord


def _fields(step: int) -> dict:
    mem = stats_from_mapping({
        "allocated_bytes.all.current": 3 << 30, "reserved_bytes.all.current": 4 << 30,
        "allocated_bytes.all.peak": 5 << 30, "reserved_bytes.all.peak": 5 << 30,
        "inactive_split_bytes.all.current": 1 << 20, "active_bytes.all.current": 3 << 30,
        "num_alloc_retries": 0, "num_ooms": 0,
    })
    return dict(rank=0, step=step, t_end_s=time.time(), step_ms=12.345, data_wait_ms=0.12, h2d_ms=0.05,
                h2d_bytes=1 << 20, h2d_pageable_bytes=0, h2d_copies=2, h2d_blocking_copies=0, host_syncs=0,
                samples=256, tokens=None, micro_steps=1, empty_cache_calls=0, scaler_skipped=None,
                mem=mem, loss=2.345, loss_finite=True, gpu_ms=11.9)


def _per_record_us(n: int, write) -> float:
    start = time.perf_counter()
    for i in range(n):
        write(i)
    return (time.perf_counter() - start) / n * 1e6


def main(n: int = 10_000, rounds: int = 5) -> None:
    base = _fields(0)
    with tempfile.TemporaryDirectory() as tmp:
        results: dict[str, list[float]] = {"new": [], "new_mem": [], "old": []}
        for r in range(rounds):
            new = StepFile(Path(tmp) / f"new{r}.jsonl", kind="steps")
            plain = {**base, "mem": to_dict(base["mem"])}
            results["new"].append(_per_record_us(n, lambda i: new.write_lines([step_line({**plain, "step": i})])))
            new.close()
            new = StepFile(Path(tmp) / f"mem{r}.jsonl", kind="steps")
            results["new_mem"].append(_per_record_us(
                n, lambda i: new.write_lines([step_line({**base, "mem": to_dict(base["mem"]), "step": i})])))
            new.close()
            with JsonlWriter(Path(tmp) / f"old{r}.jsonl", kind="steps") as old:
                results["old"].append(_per_record_us(n, lambda i: old.write(StepRecord(**{**base, "step": i}))))
    print(f"{n} appends x {rounds} rounds, microseconds per record (median over rounds, range):")
    for name, label in (("new", "probe line: encode + one os.write (O_APPEND)"),
                        ("new_mem", "  + the allocator counters converted (once per GPU step)"),
                        ("old", "before: dumps(StepRecord) + JsonlWriter.write/flush")):
        values = results[name]
        print(f"  {label:58s} {statistics.median(values):6.1f}  ({min(values):.1f}-{max(values):.1f})")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 10_000)
