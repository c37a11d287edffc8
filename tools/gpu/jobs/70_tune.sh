#!/usr/bin/env bash
# 70_tune — `gpudoctor tune` on one H200: the single-GPU bars of issue 10 (the 2-GPU bar is 71_tune_ddp).
# Run:    bash tools/gpu/run_all.sh 70_tune:430          (kind nvidia-h200; one device call)
# Budget: TUNE_JOB_S (default 420 s; give run_all 10 s more). GPU tests first, killed at TUNE_TEST_S
#   (40 s). Then benchmarks/tune_resnet18.py, killed at what is left minus 5 s; its own --budget-s is 20 s
#   less (torch import and data set-up come first; it starts no step it cannot finish by then):
#   `tune all` may start trials for TUNE_ALL_S (210 s), then two epochs + eval at the found batch,
#   tuned vs defaults, and the true limit (1% resolution) get the rest, in that order.
# Knobs:  TUNE_JOB_S, TUNE_TEST_S, TUNE_ALL_S; TUNE_COMPILE=1 includes the torch.compile trial in tune all
#   (measured with TUNE_JOB_S=390 TUNE_ALL_S=200 and run_all 400: benchmarks/results/tune-resnet18-h200.json).
#   Dry run on a CPU: TUNE_BENCH_SMOKE=1 (tiny CNN with a simulated memory limit; figures mean nothing).
# Writes to $JOB_OUT:
#   tune-resnet18-h200.json   the bars, every trial, the exact command -> commit as benchmarks/results/tune-resnet18-h200.json
#   tune-resnet18-tuned.toml, tune-resnet18-tuned.loader.toml  the config tune wrote -> commit beside it in benchmarks/results/
#   tune-resnet18-summary.txt the bench's summary (stdout)             -> commit as benchmarks/results/tune-resnet18-h200.txt
#   tune-resnet18.log         progress: one line per trial (stderr)
#   pytest-tune-gpu.txt       tests/gpu/test_tune_gpu.py
#   timings.txt               wall time and rc of each step
set -u
cd "$(dirname "$0")/../../.."
export PYTHONPATH="$PWD/src${PYTHONPATH:+:$PYTHONPATH}" COLUMNS=120 CUDA_VISIBLE_DEVICES=0
: "${JOB_OUT:=/tmp/out/70_tune}" "${TUNE_JOB_S:=420}" "${TUNE_TEST_S:=40}" "${TUNE_ALL_S:=210}" "${TUNE_COMPILE:=0}"
mkdir -p "$JOB_OUT"
timings="$JOB_OUT/timings.txt"
: >"$timings"

record() {  # record NAME RC START COMMAND...
  printf '%-6s rc=%-3s %4d s  %s\n' "$1" "$2" "$((SECONDS - $3))" "${*:4}" | tee -a "$timings"
}

start=$SECONDS
if python3 -c "import pytest" 2>/dev/null; then
  timeout -k 5 "$TUNE_TEST_S" python3 -m pytest -q -m gpu -p no:cacheprovider tests/gpu/test_tune_gpu.py \
    >"$JOB_OUT/pytest-tune-gpu.txt" 2>&1
  record tests $? "$start" "pytest -m gpu tests/gpu/test_tune_gpu.py (limit ${TUNE_TEST_S}s)"
else
  echo "pytest missing: GPU tests skipped" | tee "$JOB_OUT/pytest-tune-gpu.txt"
fi

kill_s=$((TUNE_JOB_S - SECONDS - 5))
bench_s=$((kill_s - 20))
compile_flag=""
[ "$TUNE_COMPILE" = 1 ] && compile_flag=--compile
start=$SECONDS
# shellcheck disable=SC2086  # compile_flag is empty or one word
timeout -k 5 "$kill_s" python3 benchmarks/tune_resnet18.py --out "$JOB_OUT/tune-resnet18-h200.json" \
  --budget-s "$bench_s" --tune-budget-s "$TUNE_ALL_S" $compile_flag \
  >"$JOB_OUT/tune-resnet18-summary.txt" 2>"$JOB_OUT/tune-resnet18.log"
record bench $? "$start" "benchmarks/tune_resnet18.py --budget-s $bench_s --tune-budget-s $TUNE_ALL_S $compile_flag (killed at ${kill_s}s)"

echo "--- summary ($SECONDS s)"
tail -n 2 "$JOB_OUT/pytest-tune-gpu.txt"
if [ -s "$JOB_OUT/tune-resnet18-summary.txt" ]; then
  cat "$JOB_OUT/tune-resnet18-summary.txt"
else  # killed before its summary: the JSON holds every step that finished
  echo "bench printed no summary; last progress lines:"
  tail -n 5 "$JOB_OUT/tune-resnet18.log"
fi
exit 0
