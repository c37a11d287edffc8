#!/usr/bin/env bash
# Issue 22 on one H200 (kind: nvidia-h200): memory down to the module, leak sites without an OOM,
# stages in the script's order, --what-if checkpointing against a real checkpointed run, and what
# perf.deterministic costs the engine. Needs torchvision (resnet50).
# Budget: 300 s in all: `bash tools/gpu/run_all.sh 67_memory_modules:300`.
# Run from the repo root with PYTHONPATH=src and JOB_OUT set (tools/gpu/run_all.sh does both).
# Outputs under $JOB_OUT, and where to commit them:
#   resnet50_modules_vs_hand.json, leak_site.json, what_if_checkpointing_resnet50.json,
#   deterministic_cost.json                                  -> benchmarks/results/issue22/
#   memory_run_modules.txt (memory run --modules, resnet50), memory_run_order.txt (the stage
#   order of a zero_grad-between script)                     -> docs/examples/
#   pytest-*.txt                                             -> evidence (not committed)
set -uo pipefail
PY=${PYTHON:-python3}
export COLUMNS=${COLUMNS:-110}
OUT=${JOB_OUT:?set JOB_OUT}
mkdir -p "$OUT"
source "$(dirname "${BASH_SOURCE[0]}")/../step.sh"
REPO=$PWD
export PYTHONPATH="$REPO/src${PYTHONPATH:+:$PYTHONPATH}"
DEADLINE=$((SECONDS + 290))
left() {  # seconds left before the deadline, capped at $1
  local n=$((DEADLINE - SECONDS))
  ((n > $1)) && n=$1
  ((n < 1)) && n=1
  echo "$n"
}

step modules_and_leak timeout "$(left 150)" "$PY" -m pytest -q -s -m gpu tests/gpu/test_memory_modules_gpu.py \
  -p no:cacheprovider > "$OUT/pytest-memory-modules.txt" 2>&1
step deterministic timeout "$(left 70)" "$PY" -m pytest -q -s -m gpu tests/gpu/test_engine_switches_gpu.py \
  -p no:cacheprovider > "$OUT/pytest-engine-switches.txt" 2>&1
step stage_order timeout "$(left 40)" "$PY" -m pytest -q -m gpu tests/gpu/test_memory_gpu.py -p no:cacheprovider \
  -k "stage_table" > "$OUT/pytest-stage-order.txt" 2>&1

examples() {
  local work
  work=$(mktemp -d)
  "$PY" - "$work" "$REPO/tests/gpu" <<'PYEOF'
import sys
sys.path.insert(0, sys.argv[2])
import test_memory_gpu as a, test_memory_modules_gpu as b
open(f"{sys.argv[1]}/train.py", "w").write(a.MEMORY_TRAIN)
open(f"{sys.argv[1]}/resnet.py", "w").write(b.RESNET_TRAIN)
PYEOF
  cd "$work" || return 1
  timeout "$(left 30)" "$PY" -m gpudoctor memory run --steps 6 --stages 2 --out rd -- "$PY" train.py \
    > "$OUT/memory_run_order.txt" 2> "$OUT/memory_run_order.stderr.txt"
  local rc=$?
  timeout "$(left 40)" "$PY" -m gpudoctor memory run --modules --steps 4 --stages 2 --out rd2 -- "$PY" resnet.py \
    > "$OUT/memory_run_modules.txt" 2> "$OUT/memory_run_modules.stderr.txt"
  local rc2=$?
  cd "$REPO" && rm -rf "$work" && return $((rc || rc2))
}
step examples examples

echo "== 67_memory_modules summary =="
printf '%s\n' "${status[@]}" | tee "$OUT/summary.txt"
for f in pytest-memory-modules.txt pytest-engine-switches.txt pytest-stage-order.txt; do tail -2 "$OUT/$f"; done
grep -h '"worst_rel_err"\|"cost"\|"saving_rel_err"' "$OUT"/*.json 2>/dev/null
