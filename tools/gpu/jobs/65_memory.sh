#!/usr/bin/env bash
# Memory: planted OOM capture and estimate accuracy on one H200. Budget: 90 s.
# Commit: $JOB_OUT/memory_estimate-h200.json -> benchmarks/results/; pytest output is evidence.
set -u
python3 -m pytest -q -m gpu tests/gpu/test_memory_gpu.py -p no:cacheprovider 2>&1 | tee "$JOB_OUT/pytest-memory.txt"
timeout 75 python3 benchmarks/memory_estimate.py --out "$JOB_OUT/memory_estimate-h200.json" 2>&1 | tee "$JOB_OUT/memory_estimate.txt"
