#!/usr/bin/env bash
# gpudoctor monitor's fleet metrics, parity and soak verdict on a real GPU (issues 20 and 22).
# Budget: 240 s on one H200 (kind: nvidia-h200): bash tools/gpu/run_all.sh 22_monitor_fleet:240
# Run from the repo root with PYTHONPATH=src and JOB_OUT set (tools/gpu/run_all.sh does both).
# A bf16 matmul loop runs on GPU 0 for ~170 s and keeps 256 MiB more every 5 s (a planted leak).
# Outputs under $JOB_OUT, and where to commit them:
#   metrics.txt (a whole scrape), metrics-gpu.txt (the GPU util/memory/power lines)
#                                                  -> docs/examples/monitor-prometheus.txt
#   monitor-once.txt (120 columns: fan, P-state, NVLink, per-process SM and host memory)
#                                                  -> docs/examples/monitor-once.txt
#   soak.csv, soak.host.csv (150 s at 1 Hz), soak-summary.txt (monitor --summary soak.csv)
#                                                  -> docs/examples/monitor-soak-summary.txt
#   select-uuid.json (monitor --once --json --gpus <UUID>), pytest-gpu.txt, nvidia-smi.txt
#                                                  (evidence; not committed)
# What it should show: DCGM_FI_DEV_GPU_UTIL near 100, DCGM_FI_DEV_FB_USED growing by ~256 MiB
# every 5 s, DCGM_FI_DEV_POWER_USAGE in the hundreds of W; the soak summary names GPU 0's memory
# as rising, leak-like (~3 GiB/min), and the live view of the soak's end carries the leak hint.
set -uo pipefail
PY=${PYTHON:-python3}
OUT=${JOB_OUT:?set JOB_OUT}
mkdir -p "$OUT"
source "$(dirname "${BASH_SOURCE[0]}")/../step.sh"
gd() { "$PY" -m gpudoctor "$@"; }

nvidia-smi --query-gpu=index,uuid,pci.bus_id,name,pstate,fan.speed,power.draw,memory.used \
  --format=csv > "$OUT/nvidia-smi.txt" 2>&1

"$PY" - <<'PYEOF' > "$OUT/matmul-leak-loop.log" 2>&1 &
import time, torch
a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
b = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
kept = []  # the planted leak: a 256 MiB tensor kept every 5 s
start = time.time()
end, n = start + 170, 0
while time.time() < end:
    for _ in range(50):
        torch.matmul(a, b)
    torch.cuda.synchronize()  # sync point: keep the queue short so the loop stops on time
    n += 50
    if time.time() - start > 5 * len(kept):
        kept.append(torch.empty(256 << 20, dtype=torch.uint8, device="cuda"))
print(f"matmuls: {n}, kept {len(kept)} x 256 MiB")
PYEOF
LOOP=$!
sleep 3  # CUDA context + first kernels

# The soak: 150 s at 1 Hz into a CSV, ending with its summary (--summary: exit 1 when unstable).
COLUMNS=120 gd monitor --log "$OUT/soak.csv" --interval 1 --duration 150 --gpus 0 --summary \
  > "$OUT/soak-run.txt" 2> "$OUT/soak-run.err" &
SOAK=$!

# Meanwhile the Prometheus endpoint: three scrapes, 5 s apart.
gd monitor --prometheus 127.0.0.1:9400 --interval 1 --duration 25 > /dev/null \
  2> "$OUT/prometheus.err" &
PROM=$!
sleep 5
for i in 1 2 3; do
  curl -s http://127.0.0.1:9400/metrics > "$OUT/metrics-$i.txt"; sleep 5
done
wait "$PROM"; status+=("prometheus rc=$?")
cp "$OUT/metrics-3.txt" "$OUT/metrics.txt"
grep -hE '^(DCGM_FI_DEV_(GPU_UTIL|FB_USED|POWER_USAGE|SM_CLOCK|GPU_TEMP|PSTATE)|gpudoctor_nvlink|gpudoctor_process_gpu_memory_bytes)' \
  "$OUT"/metrics-[123].txt > "$OUT/metrics-gpu.txt"

UUID=$(nvidia-smi --query-gpu=uuid --format=csv,noheader -i 0 | head -1)
step select-uuid bash -c "$PY -m gpudoctor monitor --once --json --gpus '$UUID' > '$OUT/select-uuid.json'"
step once bash -c "COLUMNS=120 $PY -m gpudoctor monitor --once --gpus 0 > '$OUT/monitor-once.txt'"

wait "$SOAK"; status+=("soak rc=$? (1 = a GPU ran unstable: the planted leak)")
kill "$LOOP" 2>/dev/null; wait "$LOOP" 2>/dev/null
step summary bash -c "COLUMNS=120 $PY -m gpudoctor monitor --summary '$OUT/soak.csv' \
  > '$OUT/soak-summary.txt'; test \$? -le 1"
step pytest-gpu bash -c "$PY -m pytest -m gpu -q -p no:cacheprovider tests/gpu/test_monitor_gpu.py > '$OUT/pytest-gpu.txt' 2>&1"

echo "--- GPU lines of the scrapes"; cat "$OUT/metrics-gpu.txt"
echo "--- once"; cat "$OUT/monitor-once.txt"
echo "--- soak summary"; cat "$OUT/soak-summary.txt"
echo "--- selected by UUID"; grep -o '"uuid": "[^"]*"' "$OUT/select-uuid.json" | head -2
tail -n 3 "$OUT/pytest-gpu.txt"
echo "--- summary"; printf '%s\n' "${status[@]}"
