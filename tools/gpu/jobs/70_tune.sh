#!/usr/bin/env bash
# 70_tune — `gpudoctor tune` on real GPUs (issue 10 bars). 1 H200; on a 2-GPU machine it also tunes
# the ddp knob under torchrun.
# Budget: 240 s in all (worst case, every step killed at its limit): GPU tests ~20 s (killed at 35 s);
# bench/tune_resnet18.py caps itself with --budget-s: 1 GPU 190 s (killed at 200 s; tune all gets
# --tune-budget-s 100), 2 GPUs 150 s (killed at 160 s; tune all 90 s) and then the torchrun ddp step
# (killed at 45 s).
# Writes to $JOB_OUT:
#   tune-resnet18-h200.json  the bars, every trial, the exact command -> commit as bench/results/tune-resnet18-h200.json
#   tune-resnet18-tuned.toml / .loader.toml  the config tune wrote   -> commit beside it in bench/results/
#   tune-resnet18.txt        the bench's progress lines and summary
#   tune-ddp-2gpu.json       (2 GPUs) `tune ddp` under torchrun, --json  -> commit as bench/results/tune-ddp-2xh200.json
#   pytest-tune-gpu.txt      tests/gpu/test_tune_gpu.py
#   timings.txt              wall time and rc of each step
set -u
cd "$(dirname "$0")/../../.."
export PYTHONPATH="$PWD/src${PYTHONPATH:+:$PYTHONPATH}" COLUMNS=120
: "${JOB_OUT:=/tmp/out/70_tune}"
mkdir -p "$JOB_OUT"
timings="$JOB_OUT/timings.txt"
: >"$timings"
ngpu=$(python3 -c "import torch; print(torch.cuda.device_count())" 2>/dev/null || echo 0)

step() {  # step NAME LIMIT OUTFILE CMD...: run CMD with a time limit, output to OUTFILE, record rc and time
  local name=$1 limit=$2 out=$3; shift 3
  local start=$SECONDS
  timeout "$limit" "$@" >"$out" 2>&1
  local rc=$?
  printf '%-8s rc=%-3s %4d s  %s\n' "$name" "$rc" "$((SECONDS - start))" "$*" | tee -a "$timings"
}

if python3 -c "import pytest" 2>/dev/null; then
  step tests 35 "$JOB_OUT/pytest-tune-gpu.txt" env CUDA_VISIBLE_DEVICES=0 \
    python3 -m pytest -q -m gpu -p no:cacheprovider tests/gpu/test_tune_gpu.py
else
  echo "pytest missing: GPU tests skipped" | tee "$JOB_OUT/pytest-tune-gpu.txt"
fi

if [ "$ngpu" -ge 2 ]; then bench_budget=150; tune_budget=90; else bench_budget=190; tune_budget=100; fi
step bench $((bench_budget + 10)) "$JOB_OUT/tune-resnet18.txt" env CUDA_VISIBLE_DEVICES=0 \
  python3 bench/tune_resnet18.py --out "$JOB_OUT/tune-resnet18-h200.json" --budget-s "$bench_budget" \
  --tune-budget-s "$tune_budget"

if [ "$ngpu" -ge 2 ]; then
  # stdout = rank 0's JSON; stderr (progress, both ranks' messages) kept apart
  start=$SECONDS
  timeout 45 python3 -m torch.distributed.run --standalone --nproc_per_node 2 -m gpudoctor tune ddp \
    --target bench/tune_resnet18.py:target --json --steps 8 --budget-s 30 --out "$JOB_OUT/tune-ddp-2gpu.toml" \
    >"$JOB_OUT/tune-ddp-2gpu.json" 2>"$JOB_OUT/tune-ddp-2gpu.err"
  printf '%-8s rc=%-3s %4d s  %s\n' ddp "$?" "$((SECONDS - start))" "torchrun --nproc_per_node 2 -m gpudoctor tune ddp" | tee -a "$timings"
else
  echo "ddp      skipped: $ngpu GPU(s) visible, the ddp knob needs 2" | tee -a "$timings"
fi

echo "--- summary"
cat "$timings"
tail -n 3 "$JOB_OUT/pytest-tune-gpu.txt"
sed -n '/^{/,$p' "$JOB_OUT/tune-resnet18.txt" | head -60
[ -s "$JOB_OUT/tune-ddp-2gpu.json" ] && python3 -c "
import json, sys
r = json.load(open(sys.argv[1]))
for k in r['knobs']:
    print(k['knob'], '|', k['summary'])
    for t in k['trials']:
        print('  ', t['setting'], t['verdict'], t['samples_per_s'])
" "$JOB_OUT/tune-ddp-2gpu.json"
exit 0
