#!/usr/bin/env bash
# 10_check — `gpudoctor check` on this device machine (1 or 2 GPUs: the same job serves both).
# Budget: 40 s (three check runs of < 10 s each, then the GPU tests, which run check 3 more times).
# Writes to $JOB_OUT (N = number of GPUs):
#   check-<N>gpu.txt   the table (COLUMNS=100)        check-<N>gpu.json  the --json output
#   env-<N>gpu.json    the --freeze file              timings-<N>gpu.txt wall time of each step
#   pytest-check-<N>gpu.txt  the GPU tests            *.stderr           what each step said on stderr
# Commit check-*.txt, check-*.json and env-*.json under docs/examples/.
set -u
cd "$(dirname "$0")/../../.."
export PYTHONPATH="$PWD/src${PYTHONPATH:+:$PYTHONPATH}" COLUMNS=100
: "${JOB_OUT:=/tmp/out/10_check}"
mkdir -p "$JOB_OUT"
N=$(python3 -c "import torch; print(torch.cuda.device_count() if torch.cuda.is_available() else 0)" 2>/dev/null || echo 0)
timings="$JOB_OUT/timings-${N}gpu.txt"
: >"$timings"

step() {  # step NAME OUTFILE CMD...: run CMD with stdout to OUTFILE, record rc and wall time
  local name=$1 out=$2; shift 2
  local start=$EPOCHREALTIME
  "$@" >"$out" 2>"$out.stderr"
  local rc=$? end=$EPOCHREALTIME
  printf '%-14s rc=%-3s %6.2f s  %s\n' "$name" "$rc" \
    "$(python3 -c "print(f'{$end - $start:.2f}')")" "$*" | tee -a "$timings"
}

step table "$JOB_OUT/check-${N}gpu.txt" python3 -m gpudoctor check
step json "$JOB_OUT/check-${N}gpu.json" python3 -m gpudoctor check --json
step freeze "$JOB_OUT/freeze-${N}gpu.txt" python3 -m gpudoctor check --freeze "$JOB_OUT/env-${N}gpu.json"
if python3 -c "import pytest" 2>/dev/null; then
  step pytest "$JOB_OUT/pytest-check-${N}gpu.txt" \
    python3 -m pytest -m gpu tests/gpu/test_check_gpu.py -q -p no:cacheprovider
else
  step tests "$JOB_OUT/pytest-check-${N}gpu.txt" python3 tests/gpu/test_check_gpu.py
fi

echo "--- summary (${N} GPU(s))"
cat "$timings"
tail -n 1 "$JOB_OUT/check-${N}gpu.txt"
tail -n 3 "$JOB_OUT/pytest-check-${N}gpu.txt"
