#!/usr/bin/env bash
# 51_engine_rerun — issue 5's re-run after the first H200 run: only the configurations that changed.
# Kind: ONE GPU (GPU 0 of the 2-GPU machine is fine: this job sets CUDA_VISIBLE_DEVICES=0).
# Budget: 150 s. peers.py stops starting configurations at --budget-s 138 (each one is skipped, by
# name, if it would likely end later) and is killed at 145 s; it rewrites its JSON after every
# configuration, so a kill keeps what was measured. Runs, in this order:
#   resnet/gpudoctor_gpu_loader, resnet/plain, resnet/gpudoctor_defaults (engine defaults now put a
#   convnet on the GPU in channels-last), gpt124m/hand_compiled, gpt124m/gpudoctor_compiled,
#   gpt350m/gpudoctor_compiled (the optimizer-factory crash is fixed).
# Compile: torch.compile mode='default' only (no autotuning); each GPT entry's "warmup_wall_s" is the
# wall time up to the first timed step, i.e. it includes compiling. gpt124m/gpudoctor_compiled reuses
# the hand loop's inductor caches from the same run (same graph), the 350M compiles from scratch.
# Merges into the committed benchmarks/results/peers-h200.json: the Lightning/Accelerate entries of the
# first run are kept; every entry has "run_utc" (the run that measured it), "runs" lists both runs,
# and "ratios" are recomputed over the merged entries.
# Writes to $JOB_OUT: peers-h200.json (merged), peers.txt (log + table), nvidia-smi.txt.
# Commit $JOB_OUT/peers-h200.json over benchmarks/results/peers-h200.json and quote its "ratios".
set -u
cd "$(dirname "$0")/../../.."
export PYTHONPATH="$PWD/src${PYTHONPATH:+:$PYTHONPATH}"
export CUDA_VISIBLE_DEVICES=0
: "${JOB_OUT:=/tmp/out/51_engine_rerun}"
mkdir -p "$JOB_OUT"
start=$(date +%s)
nvidia-smi --query-gpu=index,name,memory.used,utilization.gpu --format=csv >"$JOB_OUT/nvidia-smi.txt" 2>&1 || true
ONLY="resnet/gpudoctor_gpu_loader,resnet/plain,resnet/gpudoctor_defaults,gpt124m/hand_compiled"
ONLY="$ONLY,gpt124m/gpudoctor_compiled,gpt350m/gpudoctor_compiled"
MERGE=()
if [ -f benchmarks/results/peers-h200.json ]; then
  MERGE=(--merge-into benchmarks/results/peers-h200.json)
else
  echo "benchmarks/results/peers-h200.json missing: writing this run's entries alone" | tee -a "$JOB_OUT/peers.txt"
fi
timeout 145 python3 benchmarks/peers.py --part all --only "$ONLY" --budget-s 138 "${MERGE[@]}" \
  --out "$JOB_OUT/peers-h200.json" >>"$JOB_OUT/peers.txt" 2>&1
echo "peers rc=$? ($(( $(date +%s) - start )) s)"
echo "--- summary"
grep '^\[peers\]' "$JOB_OUT/peers.txt"
sed -n '/^configuration/,$p' "$JOB_OUT/peers.txt"
