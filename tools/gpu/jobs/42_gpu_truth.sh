#!/usr/bin/env bash
# Issue 15, GPU-timeline truth (budget 200 s on one H200):
#  1. a GPU-bound fp32 conv net at the default --steps: named fp32 compute-bound, compute >= 90%
#     of the step in the table, MFU stated (fp32_convnet --size medium);
#  2. the host-sync cost estimate against the measured fix: item_every_step and a copy with the
#     two per-step reads removed (loss and accuracy kept on the GPU, read every 20 steps), run
#     A B A B under `gpudoctor run --steps 60`; throughput from the run directories.
# Outputs under $JOB_OUT: gpu_bound.txt, sync_ab.json/.txt, runs/ (evidence, not committed).
set -uo pipefail
PY=${PYTHON:-python3}
OUT=${JOB_OUT:?set JOB_OUT}
mkdir -p "$OUT/runs"
source "$(dirname "${BASH_SOURCE[0]}")/../step.sh"

gpu_bound() {
  "$PY" -m gpudoctor run --out "$OUT/runs/fp32_medium" -- \
    "$PY" -m gpudoctor.workloads.fp32_convnet --size medium --steps 80 > "$OUT/gpu_bound.txt" 2>&1
}
step gpu_bound gpu_bound

"$PY" - "$OUT/item_fixed.py" <<'PYEOF'
import inspect, sys
import gpudoctor.workloads.item_every_step as w
src = inspect.getsource(w)
for old, new in [
    ("        losses.append(loss.item())  # host sync: waits for the whole backward pass\n",
     "        losses.append(loss.detach())  # fixed by hand: stays on the GPU\n"),
    ("        accs.append((out.argmax(1) == y).float().mean().cpu())  # host sync: waits for the step\n",
     "        accs.append((out.argmax(1) == y).float().mean())  # fixed by hand: stays on the GPU\n"),
    ("sum(losses[-20:]) / 20:.4f", "torch.stack(losses[-20:]).mean().item():.4f"),
    ("acc {accs[-1]:.3f}", "acc {accs[-1].item():.3f}"),
]:
    assert old in src, old
    src = src.replace(old, new)
open(sys.argv[1], "w").write(src)
PYEOF

ab() {
  for round in 1 2; do
    "$PY" -m gpudoctor run --out "$OUT/runs/sync_orig_$round" -- "$PY" -m gpudoctor.workloads.item_every_step --steps 80 > "$OUT/sync_orig_$round.txt" 2>&1
    "$PY" -m gpudoctor run --out "$OUT/runs/sync_fixed_$round" -- "$PY" "$OUT/item_fixed.py" --steps 80 > "$OUT/sync_fixed_$round.txt" 2>&1
  done
  "$PY" - "$OUT" <<'PYEOF'
import json, statistics, sys
from pathlib import Path
from gpudoctor.analysis.diagnose import diagnose
from gpudoctor.analysis.run_stats import run_stats
from gpudoctor.records.rundir import load_run
out = Path(sys.argv[1])
rows = {}
for arm in ("orig", "fixed"):
    rows[arm] = [run_stats(load_run(out / "runs" / f"sync_{arm}_{r}"))[0].throughput for r in (1, 2)]
predicted = [f.expected_gain for f in diagnose(load_run(out / "runs" / "sync_orig_1")) if f.code == "GD-RUN-HOST-SYNC"]
gains = [f / o - 1 for o, f in zip(rows["orig"], rows["fixed"])]
res = {"throughput_steps_per_s": rows, "measured_gain_per_round": gains,
       "measured_gain_median": statistics.median(gains), "predicted_gain": predicted}
(out / "sync_ab.json").write_text(json.dumps(res, indent=2))
print(json.dumps(res, indent=2))
PYEOF
}
step sync_ab ab > "$OUT/sync_ab.txt" 2>&1

echo "=== summary"
sed -n 1,40p "$OUT/gpu_bound.txt"
cat "$OUT/sync_ab.txt"
printf '%s\n' "${status[@]}"
