#!/usr/bin/env bash
# 50_engine — gpudoctor.train on ONE H200: the engine's GPU tests, then benchmarks/peers.py (ResNet-18 and
# GPT vs hand-tuned PyTorch, Lightning, Accelerate).
# Budget: 240 s (GPU tests ~30 s, killed at 50 s; peers.py caps itself at 170 s (killed at 185 s) with --budget-s and skips, by name,
# any configuration that would not finish in time).
# Writes to $JOB_OUT: pytest-train-gpu.txt, peers.txt (the table), peers-h200.json.
# Commit $JOB_OUT/peers-h200.json as benchmarks/results/peers-h200.json and quote its "ratios".
set -u
cd "$(dirname "$0")/../../.."
export PYTHONPATH="$PWD/src${PYTHONPATH:+:$PYTHONPATH}"
: "${JOB_OUT:=/tmp/out/50_engine}"
mkdir -p "$JOB_OUT"
start=$(date +%s)
if python3 -c "import pytest" 2>/dev/null; then
  timeout 50 python3 -m pytest -q -m gpu -p no:cacheprovider tests/gpu/test_train_gpu.py >"$JOB_OUT/pytest-train-gpu.txt" 2>&1
  echo "gpu tests rc=$? ($(( $(date +%s) - start )) s)"
else
  echo "pytest missing: GPU tests skipped" | tee "$JOB_OUT/pytest-train-gpu.txt"
fi
timeout 185 python3 benchmarks/peers.py --part all --budget-s 170 --out "$JOB_OUT/peers-h200.json" >"$JOB_OUT/peers.txt" 2>&1
echo "peers rc=$? ($(( $(date +%s) - start )) s)"
echo "--- summary"
tail -n 3 "$JOB_OUT/pytest-train-gpu.txt"
sed -n '/^configuration/,$p' "$JOB_OUT/peers.txt"
