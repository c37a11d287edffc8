"""Measure: NVML and host samplers, in-process probes, environment probes. Output is records."""
