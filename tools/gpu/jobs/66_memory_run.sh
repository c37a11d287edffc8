#!/usr/bin/env bash
# gpudoctor memory on one H200: the stage table of a small MLP and a planted OOM captured through
# the launcher (memory run), a planted OOM through the engine (robust.oom_snapshot) rendered by
# `gpudoctor memory show`, and the GPU tests of both.
# Budget: 120 s in all (kind: nvidia-h200): `bash tools/gpu/run_all.sh 66_memory_run:120`.
# Each step gets what is left of a 110 s deadline, so the summary is always written.
# Run from the repo root with PYTHONPATH=src and JOB_OUT set (tools/gpu/run_all.sh does both).
# Outputs under $JOB_OUT, and where to commit them:
#   memory_run.txt, memory_run.json, memory_run_oom.txt,
#   memory_engine_oom.txt, memory_engine_oom.json               -> docs/examples/
#   engine-oom-rank0.json (the engine's reduced OOM snapshot)    -> tests/fixtures/memory/engine_oom/oom-rank0.json
#   memory_engine_oom.stderr.txt (the engine's warning and error) -> docs/examples/
#   pytest-memory-run.txt, memory_viz.txt, other *.stderr.txt    -> evidence (not committed)
set -uo pipefail
PY=${PYTHON:-python3}
export COLUMNS=${COLUMNS:-110}
OUT=${JOB_OUT:?set JOB_OUT}
mkdir -p "$OUT"
source "$(dirname "${BASH_SOURCE[0]}")/../step.sh"
REPO=$PWD
export PYTHONPATH="$REPO/src${PYTHONPATH:+:$PYTHONPATH}"  # absolute: the steps run inside $WORK
DEADLINE=$((SECONDS + 110))
left() {  # seconds left before the deadline, capped at $1
  local n=$((DEADLINE - SECONDS))
  ((n > $1)) && n=$1
  ((n < 1)) && n=1
  echo "$n"
}

# The example scripts are the GPU tests' own (one source of truth); relative paths inside $WORK
# keep the committed examples free of temporary folder names.
WORK=$(mktemp -d)
"$PY" - "$WORK" "$REPO/tests/gpu" <<'PYEOF'
import sys
sys.path.insert(0, sys.argv[2])
import test_memory_gpu as t
open(f"{sys.argv[1]}/train.py", "w").write(t.MEMORY_TRAIN)
open(f"{sys.argv[1]}/train_oom.py", "w").write(t.MEMORY_OOM)
PYEOF

example() {
  cd "$WORK" || return 1
  timeout "$(left 25)" "$PY" -m gpudoctor memory run --steps 8 --stages 3 --out rd -- "$PY" train.py \
    > "$OUT/memory_run.txt" 2> "$OUT/memory_run.stderr.txt"
  local rc=$?
  timeout "$(left 25)" "$PY" -m gpudoctor memory run --steps 8 --stages 3 --json --out rd-json -- "$PY" train.py \
    > "$OUT/memory_run.json" 2>> "$OUT/memory_run.stderr.txt"
  local rc2=$?
  cd "$REPO" && return $((rc || rc2))
}
step example example

oom_example() {
  cd "$WORK" || return 1
  # the script dies of the planted OOM (non-zero exit is expected); the snapshot must be there
  timeout "$(left 25)" "$PY" -m gpudoctor memory run --steps 6 --out rd-oom -- "$PY" train_oom.py \
    > "$OUT/memory_run_oom.txt" 2> "$OUT/memory_run_oom.stderr.txt"
  test -f rd-oom/oom.json && test -f rd-oom/oom-snapshot.pickle
  local rc=$?
  cd "$REPO" && return $rc
}
step oom_example oom_example

engine_oom() {
  cd "$WORK" || return 1
  # the engine (default robust.oom_snapshot="on_oom") trains into the planted OOM, recovers once,
  # gives up at the repeat; its error names the files and the command below
  timeout "$(left 30)" "$PY" - "$REPO/tests/gpu" > "$OUT/memory_engine_oom.stderr.txt" 2>&1 <<'PYEOF'
import sys
sys.path.insert(0, sys.argv[1])
import test_memory_gpu as t
print("engine error:", t.train_into_oom("oom"))
PYEOF
  timeout "$(left 15)" "$PY" -m gpudoctor memory show oom/oom-rank0.json > "$OUT/memory_engine_oom.txt" \
    2>> "$OUT/memory_engine_oom.stderr.txt"
  local rc=$?
  timeout "$(left 15)" "$PY" -m gpudoctor memory show --json oom/oom-rank0.json > "$OUT/memory_engine_oom.json" \
    2>> "$OUT/memory_engine_oom.stderr.txt"
  cp oom/oom-rank0.json "$OUT/engine-oom-rank0.json"
  # PyTorch's own viewer reads the pickle: its HTML converter must accept it
  timeout "$(left 20)" "$PY" -m torch.cuda._memory_viz trace_plot oom/oom-snapshot-rank0.pickle -o viz.html \
    > "$OUT/memory_viz.txt" 2>&1
  local viz=$?
  echo "trace_plot rc=$viz, html $(stat -c %s viz.html 2>/dev/null || echo 0) bytes, pickle $(stat -c %s \
    oom/oom-snapshot-rank0.pickle 2>/dev/null || echo 0) bytes" >> "$OUT/memory_viz.txt"
  grep -q "_planted_activation" "$OUT/memory_engine_oom.txt"  # the top site names the planted allocation
  local found=$?
  cd "$REPO" && return $((rc || viz || found))
}
step engine_oom engine_oom

step pytest timeout "$(left 60)" "$PY" -m pytest -q -m gpu tests/gpu/test_memory_gpu.py -p no:cacheprovider \
  -k "memory_run or engine" > "$OUT/pytest-memory-run.txt" 2>&1
rm -rf "$WORK"

echo "== 66_memory_run summary =="
printf '%s\n' "${status[@]}" | tee "$OUT/summary.txt"
tail -3 "$OUT/pytest-memory-run.txt"
tail -1 "$OUT/memory_viz.txt"
