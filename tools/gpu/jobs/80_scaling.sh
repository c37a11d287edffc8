#!/usr/bin/env bash
# 80_scaling — benchmarks/scaling.py (issue 11) on every visible GPU: all_reduce busbw 1 MiB-4 GiB at the
# full world size, gpudoctor run on a planted straggler (rank 5 at 8 GPUs, else the last rank), and
# GPT-2 124M / ResNet-18 DDP + FSDP2 throughput and scaling efficiency at world sizes 1,2,4,8 (those
# <= the visible GPUs; the others are recorded as skipped).
# Budget: 300 s on nvidia-h200-x2 (world sizes 1,2), 560 s on nvidia-h200-x8 (1,2,4,8).
# Writes to $JOB_OUT: scaling-<N>gpu.json, scaling-<N>gpu.txt (the table), scaling-<N>gpu.log.
# Commit scaling-<N>gpu.json and scaling-<N>gpu.txt to benchmarks/results/.
set -u
cd "$(dirname "$0")/../../.."
export PYTHONPATH="$PWD/src${PYTHONPATH:+:$PYTHONPATH}"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
: "${JOB_OUT:=/tmp/out/80_scaling}"
mkdir -p "$JOB_OUT"
n=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ')
# the script's own wall budget, under the job's: every launch gets at most what is left of it
if [ "$n" -ge 8 ]; then budget=520; else budget=260; fi
echo "visible GPUs: $n; benchmarks/scaling.py budget ${budget} s"
start=$(date +%s)
python3 benchmarks/scaling.py --out "$JOB_OUT/scaling-${n}gpu.json" --world-sizes 1,2,4,8 \
  --budget-s "$budget" --timeout-s 200 >"$JOB_OUT/scaling-${n}gpu.log" 2>&1
rc=$?
sed -n '/^scaling run:/,$p' "$JOB_OUT/scaling-${n}gpu.log" >"$JOB_OUT/scaling-${n}gpu.txt"
echo "--- summary: rc=$rc (1 = a part did not pass), $(( $(date +%s) - start )) s"
cat "$JOB_OUT/scaling-${n}gpu.txt"
[ -s "$JOB_OUT/scaling-${n}gpu.txt" ] || tail -n 30 "$JOB_OUT/scaling-${n}gpu.log"
