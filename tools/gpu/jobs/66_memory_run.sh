#!/usr/bin/env bash
# gpudoctor memory run on one H200: the stage table of a small MLP and a planted OOM captured
# through the launcher. Budget: 90 s (kind: nvidia-h200).
# Run from the repo root with PYTHONPATH=src and JOB_OUT set (tools/gpu/run_all.sh does both).
# Outputs under $JOB_OUT, and where to commit them:
#   memory_run.txt, memory_run.json, memory_run_oom.txt  -> docs/examples/
#   pytest-memory-run.txt                                -> evidence (not committed)
set -uo pipefail
PY=${PYTHON:-python3}
OUT=${JOB_OUT:?set JOB_OUT}
mkdir -p "$OUT"
source "$(dirname "${BASH_SOURCE[0]}")/../step.sh"

step pytest timeout 60 "$PY" -m pytest -q -m gpu tests/gpu/test_memory_gpu.py -p no:cacheprovider \
  -k "memory_run" > "$OUT/pytest-memory-run.txt" 2>&1

WORK=$(mktemp -d)
"$PY" - "$WORK" <<'PYEOF'
import sys
sys.path.insert(0, "tests/gpu")
import test_memory_gpu as t
open(f"{sys.argv[1]}/train.py", "w").write(t.MEMORY_TRAIN)
open(f"{sys.argv[1]}/train_oom.py", "w").write(t.MEMORY_OOM)
PYEOF
example() {
  timeout 25 "$PY" -m gpudoctor memory run --steps 8 --stages 3 --out "$WORK/rd" -- "$PY" "$WORK/train.py" \
    > "$OUT/memory_run.txt" 2> "$OUT/memory_run.stderr.txt"
  timeout 25 "$PY" -m gpudoctor memory run --steps 8 --stages 3 --json --out "$WORK/rd-json" -- "$PY" "$WORK/train.py" \
    > "$OUT/memory_run.json" 2>> "$OUT/memory_run.stderr.txt"
}
step example example
oom_example() {
  timeout 25 "$PY" -m gpudoctor memory run --steps 6 --out "$WORK/rd-oom" -- "$PY" "$WORK/train_oom.py" \
    > "$OUT/memory_run_oom.txt" 2> "$OUT/memory_run_oom.stderr.txt"
  test -f "$WORK/rd-oom/oom.json"  # the planted OOM must leave its snapshot
}
step oom_example oom_example
rm -rf "$WORK"

echo "== 66_memory_run summary =="
printf '%s\n' "${status[@]}" | tee "$OUT/summary.txt"
tail -3 "$OUT/pytest-memory-run.txt"
