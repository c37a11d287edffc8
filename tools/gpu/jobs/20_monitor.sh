#!/usr/bin/env bash
# gpudoctor monitor on a real GPU (issue 3). Budget: 90 s on one H200 (kind: nvidia-h200).
# Run from the repo root with PYTHONPATH=src and JOB_OUT set (tools/gpu/run_all.sh does both).
# Outputs under $JOB_OUT, and where to commit them:
#   h200-samples.jsonl, h200-samples.host.jsonl  -> tests/fixtures/monitor/
#   monitor-once.txt, monitor-once.json, monitor-stream.jsonl, monitor-view.txt,
#   monitor-log.csv (+ monitor-log.host.csv)      -> docs/examples/
#   monitor_overhead.json (table: monitor_overhead.txt) -> benchmarks/results/
#   pytest-gpu.txt, nvidia-smi.txt, job.log       (evidence; not committed)
set -uo pipefail
PY=${PYTHON:-python3}
OUT=${JOB_OUT:?set JOB_OUT}
mkdir -p "$OUT"
source "$(dirname "${BASH_SOURCE[0]}")/../step.sh"
gd() { "$PY" -m gpudoctor "$@"; }
pidopt() { kill -0 "$LOOP" 2>/dev/null && echo "--pid $LOOP"; }  # only while the loop lives

nvidia-smi --query-gpu=index,name,driver_version,power.limit,clocks_event_reasons.active \
  --format=csv > "$OUT/nvidia-smi.txt" 2>&1

# A bf16 matmul loop in the background, so the recorded stream shows a busy GPU (about 30 s).
"$PY" - <<'PYEOF' > "$OUT/matmul-loop.log" 2>&1 &
import time, torch
a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
b = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
end = time.time() + 30
n = 0
while time.time() < end:
    for _ in range(50):
        torch.matmul(a, b)
    torch.cuda.synchronize()  # sync point: keep the queue short so the loop stops on time
    n += 50
print(f"matmuls: {n}")
PYEOF
LOOP=$!
sleep 3  # CUDA context + first kernels

step record gd monitor --log "$OUT/h200-samples.jsonl" --interval 0.1 --duration 5 --gpus 0 \
  $(pidopt) > "$OUT/monitor-record-view.txt"
step once bash -c "COLUMNS=120 $PY -m gpudoctor monitor --once $(pidopt) > '$OUT/monitor-once.txt'"
step once-json bash -c "$PY -m gpudoctor monitor --once --json > '$OUT/monitor-once.json'"
step stream-json bash -c "$PY -m gpudoctor monitor --json --interval 0.2 --duration 1 > '$OUT/monitor-stream.jsonl'"
# The live view as a non-terminal renders it: the final frame, 120 columns; with a CSV log.
step live-view bash -c "COLUMNS=120 $PY -m gpudoctor monitor --duration 3 --interval 0.5 \
  $(pidopt) --log '$OUT/monitor-log.csv' > '$OUT/monitor-view.txt'"
kill "$LOOP" 2>/dev/null; wait "$LOOP" 2>/dev/null

# Written in the tree first so the JSON records the command exactly as it is to be re-run.
step bench bash -c "$PY benchmarks/monitor_overhead.py --out benchmarks/results/monitor_overhead.json \
  | tee '$OUT/monitor_overhead.txt'; rc=\${PIPESTATUS[0]}; \
  cp benchmarks/results/monitor_overhead.json '$OUT/' 2>/dev/null; exit \$rc"
step pytest-gpu bash -c "$PY -m pytest -m gpu -q -p no:cacheprovider tests/gpu/test_monitor_gpu.py > '$OUT/pytest-gpu.txt' 2>&1"

echo "--- view while recording"; cat "$OUT/monitor-record-view.txt"
echo "--- samples: $(($(wc -l < "$OUT/h200-samples.jsonl") - 1)) GPU lines"
tail -n 3 "$OUT/pytest-gpu.txt"
echo "--- summary"; printf '%s\n' "${status[@]}"
