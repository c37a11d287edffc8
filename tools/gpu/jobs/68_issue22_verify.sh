#!/usr/bin/env bash
# Issue 22's last two pieces on one H200 (kind: nvidia-h200), ~150 s:
#   bash tools/gpu/run_all.sh 68_issue22_verify:170
# 1. `memory run --modules` on a ResNet-50 script with no DataLoader: every stage holds the right
#    bytes (test_memory_modules_gpu.py -k without_a_dataloader);
# 2. plain `gpudoctor run` (no memory mode) names a leak's allocation site, and the steps recorded
#    with allocation history on are left out of the steady figures (test_run_leak_sites_gpu.py);
# 3. the probes' host-side hot path (benchmarks/probe_hot_path.py --json);
# 4. the --modules example regenerated (memory run --modules on the same script).
# Outputs under $JOB_OUT: pytest-*.txt, run_leak_site.json, memory figures (save_figures),
# probe_hot_path.json -> benchmarks/results/issue22/ (figures) and benchmarks/results/ (hot path);
# memory_run_modules.txt -> benchmarks/results/issue22/.
set -uo pipefail
PY=${PYTHON:-python3}
export COLUMNS=${COLUMNS:-110}
OUT=${JOB_OUT:?set JOB_OUT}
mkdir -p "$OUT"
source "$(dirname "${BASH_SOURCE[0]}")/../step.sh"
export PYTHONPATH="$PWD/src:$PWD${PYTHONPATH:+:$PYTHONPATH}"
step no_loader_stages timeout 80 "$PY" -m pytest -q -s -m gpu tests/gpu/test_memory_modules_gpu.py \
  -k without_a_dataloader -p no:cacheprovider > "$OUT/pytest-no-loader-stages.txt" 2>&1
step run_leak_sites timeout 80 "$PY" -m pytest -q -s -m gpu tests/gpu/test_run_leak_sites_gpu.py \
  -p no:cacheprovider > "$OUT/pytest-run-leak-sites.txt" 2>&1
step probe_hot_path timeout 40 "$PY" benchmarks/probe_hot_path.py --json > "$OUT/probe_hot_path.json" \
  2> "$OUT/probe_hot_path.err"
modules_example() {
  local work repo=$PWD
  work=$(mktemp -d)
  "$PY" -c "import sys; sys.path.insert(0, 'tests/gpu'); import test_memory_modules_gpu as b; \
open(sys.argv[1] + '/resnet.py', 'w').write(b.RESNET_TRAIN)" "$work"
  cd "$work" || return 1
  timeout 40 "$PY" -m gpudoctor memory run --modules --steps 4 --stages 2 --out rd2 -- "$PY" resnet.py \
    > "$OUT/memory_run_modules.txt" 2> "$OUT/memory_run_modules.stderr.txt"
  local rc=$?
  cd "$repo" && rm -rf "$work" && return $rc
}
step modules_example modules_example
echo "== 68_issue22_verify summary =="
printf '%s\n' "${status[@]}" | tee "$OUT/summary.txt"
tail -n 3 "$OUT"/pytest-*.txt
