"""``gpudoctor bench``: the measured ceilings of this machine (matmul per dtype, copies,
collectives, DataLoader throughput), all timed with one protocol (:mod:`.protocol`).

Only light modules are imported here; torch is imported inside the functions that measure.
"""

from gpudoctor.bench.protocol import Protocol, Spread, spread, throughput
from gpudoctor.bench.suite import SECTIONS, BenchOptions, parse_sizes, run_bench

__all__ = [
    "SECTIONS",
    "BenchOptions",
    "Protocol",
    "Spread",
    "parse_sizes",
    "run_bench",
    "spread",
    "throughput",
]
