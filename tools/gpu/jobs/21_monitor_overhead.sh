#!/usr/bin/env bash
# 21_monitor_overhead — issue 3's re-run of the monitor benchmark after the sampler's cadence fix
# (process list and PCIe once a second, power limit and ECC every 5 s, absolute deadlines).
# Kind: ONE GPU (nvidia-h200; GPU 0 of a bigger machine is fine: CUDA_VISIBLE_DEVICES=0 below).
# Budget: 120 s (the benchmark takes about 60 s, the GPU tests about 20 s, the CPU-side run 20 s).
# Run from the repo root with PYTHONPATH=src and JOB_OUT set (tools/gpu/run_all.sh does both).
# Outputs under $JOB_OUT, and where to commit them:
#   monitor_overhead.json -> benchmarks/results/monitor_overhead.json (replaces the first run's file;
#                            its new "nvml_call_costs_gpu0" says where a sample's CPU time goes)
#   monitor_overhead.txt, monitor_overhead_cpu_h200host.json, pytest-gpu.txt, nvidia-smi.txt,
#   job.log               (evidence; not committed)
set -uo pipefail
PY=${PYTHON:-python3}
OUT=${JOB_OUT:?set JOB_OUT}
mkdir -p "$OUT"
export CUDA_VISIBLE_DEVICES=0
source "$(dirname "${BASH_SOURCE[0]}")/../step.sh"
nvidia-smi --query-gpu=index,name,driver_version,power.limit --format=csv > "$OUT/nvidia-smi.txt" 2>&1

# Written in the tree first so the JSON records the command exactly as it is to be re-run.
step bench bash -c "$PY benchmarks/monitor_overhead.py --out benchmarks/results/monitor_overhead.json \
  | tee '$OUT/monitor_overhead.txt'; rc=\${PIPESTATUS[0]}; \
  cp benchmarks/results/monitor_overhead.json '$OUT/' 2>/dev/null; exit \$rc"
step pytest-gpu bash -c "$PY -m pytest -m gpu -q -p no:cacheprovider tests/gpu/test_monitor_gpu.py \
  > '$OUT/pytest-gpu.txt' 2>&1"
# The CPU-side figures on this machine's CPU too (fake NVML; the lead's copy has them for the dev box)
step cpu-side bash -c "$PY benchmarks/monitor_overhead.py --cpu-only --label after-h200-host \
  --samples 1000 --thread-s 2 --out '$OUT/monitor_overhead_cpu_h200host.json'"

tail -n 3 "$OUT/pytest-gpu.txt"
echo "--- summary"; printf '%s\n' "${status[@]}"
