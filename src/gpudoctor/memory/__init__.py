"""Memory analysis: estimate what a model needs before running it, and what fits."""

from gpudoctor.memory.estimate import EstimateConfig, estimate_memory

__all__ = ["EstimateConfig", "estimate_memory"]
