#!/usr/bin/env bash
# 41_run_overhead — what `gpudoctor run` costs the script it watches (issue 4 bars), then the
# GPU tests of the probes. 1 GPU (on a 2-GPU machine it uses GPU 0).
# Budget: 350 s — hot-path micro-benchmark 14 s; 4 rounds x 4 arms = 16 runs of a 60-step
# conv-net script, 263 s on an H200 (2026-11-30); tests ~60 s. Arms: plain, instrumented (the default
# --steps 60 layout, window on the last five steps: the bars), full_layout (--full, window 10-14)
# and probes-only (--no-profile). ROUNDS=3 trims it by ~65 s (fewer rounds: a wider spread).
# Writes to $JOB_OUT:
#   run_overhead.json   the figures, every run, the exact command  -> commit as benchmarks/results/run_overhead.json
#   run_overhead.txt    the verdict, the spread lines and each run's figures
#   probe_hot_path.txt  host-side us per patched call, per step boundary, per CUDA call of a step
#                       (memory_stats, event record, lazy loss read, is_pinned) -> commit as
#                       benchmarks/results/probe_hot_path-h200.txt
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
  timeout "${STEP_TIMEOUT:-420}" "$@" >"$out" 2>&1
  local rc=$?
  printf '%-10s rc=%-3s %4d s  %s\n' "$name" "$rc" "$((SECONDS - start))" "$*" | tee -a "$timings"
}

step hotpath "$JOB_OUT/probe_hot_path.txt" python3 benchmarks/probe_hot_path.py
step overhead "$JOB_OUT/run_overhead.txt" python3 benchmarks/run_overhead.py --rounds "${ROUNDS:-4}" --out "$JOB_OUT/run_overhead.json"
step tests "$JOB_OUT/pytest-run-gpu.txt" python3 -m pytest -m gpu tests/gpu/test_run_gpu.py -q -p no:cacheprovider

echo "--- summary"
cat "$timings"
grep -E "^(outside the window|noise floor|instrumented|full_layout|probes)" "$JOB_OUT/run_overhead.txt"
tail -n 3 "$JOB_OUT/pytest-run-gpu.txt"
