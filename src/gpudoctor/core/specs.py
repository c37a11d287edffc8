"""GPU peak throughput and bandwidth: :mod:`gpudoctor.records.gpu_specs`, re-exported for the
measuring side (bench, train, collectors)."""

from gpudoctor.records.gpu_specs import DTYPES, GpuSpec, load_specs, match_spec, peak_flops

__all__ = ["DTYPES", "GpuSpec", "load_specs", "match_spec", "peak_flops"]
