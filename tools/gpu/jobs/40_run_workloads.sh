#!/usr/bin/env bash
# gpudoctor run on every example workload (issue 4: the verdict benchmark). Budget: 240 s on one
# H200 (kind: nvidia-h200; 197 s on 2026-11-30); with 2 GPUs visible the torchrun workloads run on
# 2 ranks, one GPU each (straggler included): 158 s on 2 x H200 (kind: nvidia-h200-x2).
# Run from the repo root with PYTHONPATH=src and JOB_OUT set (tools/gpu/run_all.sh does both).
# Outputs under $JOB_OUT, and where to commit them:
#   fixtures/<workload>/            -> tests/fixtures/runs/<workload>/  (small records, no traces);
#                                      a torchrun workload recorded with 2 GPUs -> <workload>-2gpu/
#   run_verdicts.json, run_verdicts.txt  -> benchmarks/results/
#   try_basic_user.txt              -> benchmarks/results/
#   runs/, *.console.txt, job.log   (evidence; not committed: runs/ may hold traces)
set -uo pipefail
PY=${PYTHON:-python3}
OUT=${JOB_OUT:?set JOB_OUT}
mkdir -p "$OUT"
source "$(dirname "${BASH_SOURCE[0]}")/../step.sh"

nvidia-smi -L > "$OUT/nvidia-smi.txt" 2>&1

# 1. every workload under `gpudoctor run --steps 60`, timed; the table and JSON summarise the bars
step verdicts "$PY" benchmarks/run_verdicts.py --out "$OUT" --size small --steps 60 --timeout 90 \
  --pack "$OUT/fixtures"

# 2. --try with the data-loader knobs on the data-loader-bound workload: before/after
try_run() {
  "$PY" -m gpudoctor run --steps 60 --out "$OUT/try_basic_user" \
    --try num_workers=8,pin_memory,persistent_workers,prefetch_factor=4 \
    -- "$PY" -m gpudoctor.workloads.basic_user --size small --steps 80 \
    > "$OUT/try_basic_user.txt" 2> "$OUT/try_basic_user.stderr.txt"
}
step try_basic_user try_run

# 3. fixture sizes (each should be a few hundred KB at most)
du -sh "$OUT"/fixtures/* > "$OUT/fixture_sizes.txt" 2>&1

echo "=== summary"
cat "$OUT/run_verdicts.txt" 2>/dev/null
tail -n 30 "$OUT/try_basic_user.txt" 2>/dev/null
cat "$OUT/fixture_sizes.txt"
printf '%s\n' "${status[@]}"
