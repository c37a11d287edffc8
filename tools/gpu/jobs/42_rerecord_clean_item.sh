#!/usr/bin/env bash
# Re-record the two workloads changed after the first verdict run (issue 4): `clean` (small size now
# batch 1024, was 256) and `item_every_step` (host-side batch assembly that the per-step syncs now
# serialise). Budget: 90 s on one H200 (kind: nvidia-h200). `clean` runs twice, so the fixture's
# margin under the launch-bound line is seen on two runs, not one.
# Run from the repo root with PYTHONPATH=src and JOB_OUT set (tools/gpu/run_all.sh does both).
# Outputs under $JOB_OUT, and where to commit them:
#   fixtures/clean/, fixtures/item_every_step/ -> tests/fixtures/runs/clean/, tests/fixtures/runs/item_every_step/
#   run_verdicts.json, run_verdicts.txt        -> bench/results/run_verdicts-rerecord.json/.txt
#   repeat/run_verdicts.txt                    (the second clean run: evidence, not committed)
#   runs/, *.console.txt                       (evidence; not committed: runs/ may hold traces)
set -uo pipefail
PY=${PYTHON:-python3}
OUT=${JOB_OUT:?set JOB_OUT}
mkdir -p "$OUT/repeat"
source "$(dirname "${BASH_SOURCE[0]}")/../step.sh"

step rerecord "$PY" bench/run_verdicts.py --out "$OUT" --size small --steps 60 --timeout 60 \
  --only clean,item_every_step --pack "$OUT/fixtures"
step clean_again "$PY" bench/run_verdicts.py --out "$OUT/repeat" --size small --steps 60 \
  --timeout 60 --only clean

echo "=== summary"
cat "$OUT/run_verdicts.txt" 2>/dev/null
cat "$OUT/repeat/run_verdicts.txt" 2>/dev/null
du -sh "$OUT"/fixtures/* 2>/dev/null
printf '%s\n' "${status[@]}"
