"""The small base shared by the measuring side and the engine: device, distributed env, timing,
allocator statistics and GPU specs. May import torch (lazily); never NVML or rich."""
