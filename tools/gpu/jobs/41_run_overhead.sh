#!/usr/bin/env bash
# 41_run_overhead — what `gpudoctor run` costs the script it watches (issue 4 bars), then the
# GPU tests of the probes. 1 GPU (on a 2-GPU machine it uses GPU 0).
# Budget: 90 s (6 interleaved runs of a 60-step conv-net script, ~7 s each; tests ~35 s).
# Writes to $JOB_OUT:
#   run_overhead.json   the figures, every run, the exact command  -> commit as bench/results/run_overhead.json
#   run_overhead.txt    the one-line verdict and each run's figures
#   pytest-run-gpu.txt  tests/gpu/test_run_gpu.py (device figures, pageable/sync/NaN/GradScaler, --try)
#   timings.txt         wall time and rc of each step
set -u
cd "$(dirname "$0")/../../.."
export PYTHONPATH="$PWD/src${PYTHONPATH:+:$PYTHONPATH}" COLUMNS=100 CUDA_VISIBLE_DEVICES="${CUDA_VISIBLE_DEVICES:-0}"
: "${JOB_OUT:=/tmp/out/41_run_overhead}"
mkdir -p "$JOB_OUT"
timings="$JOB_OUT/timings.txt"
: >"$timings"

step() {  # step NAME OUTFILE CMD...: run CMD with stdout+stderr to OUTFILE, record rc and wall time
  local name=$1 out=$2; shift 2
  local start=$SECONDS
  timeout 200 "$@" >"$out" 2>&1
  local rc=$?
  printf '%-10s rc=%-3s %4d s  %s\n' "$name" "$rc" "$((SECONDS - start))" "$*" | tee -a "$timings"
}

step overhead "$JOB_OUT/run_overhead.txt" python3 bench/run_overhead.py --out "$JOB_OUT/run_overhead.json"
if python3 -c "import pytest" 2>/dev/null; then
  step tests "$JOB_OUT/pytest-run-gpu.txt" python3 -m pytest -m gpu tests/gpu/test_run_gpu.py -q -p no:cacheprovider
else
  step tests "$JOB_OUT/pytest-run-gpu.txt" python3 tests/gpu/test_run_gpu.py
fi

echo "--- summary"
cat "$timings"
tail -n 1 "$JOB_OUT/run_overhead.txt"
tail -n 3 "$JOB_OUT/pytest-run-gpu.txt"
