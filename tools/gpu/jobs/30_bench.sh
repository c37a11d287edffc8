#!/usr/bin/env bash
# gpudoctor bench on real GPUs (issue 7). Budget: 90 s on one H200 (kind: nvidia-h200) and
# 90 s on two (kind: nvidia-h200-x2); run it on both.
# Run from the repo root with PYTHONPATH=src and JOB_OUT set (tools/gpu/run_all.sh does both).
# Outputs under $JOB_OUT (N = the number of GPUs), and where to commit them:
#   bench-<N>gpu.txt, bench-<N>gpu.json      -> docs/examples/
#   bench-<N>gpu.time.txt (wall time of each `bench all`; the bar is < 60 s on one GPU) -> docs/examples/
#   bench-matmul-sizes-<N>gpu.json (bf16/fp8 at N = 4096, 8192, 16384: does 8192 saturate?) -> docs/examples/
#   pytest-gpu-<N>gpu.txt, bench-<N>gpu.stderr.txt, nvidia-smi.txt, job.log  (evidence; not committed)
set -uo pipefail
export NCCL_NVLS_ENABLE=0  # also passed on to torchrun by gpudoctor itself
PY=${PYTHON:-python3}
OUT=${JOB_OUT:?set JOB_OUT}
mkdir -p "$OUT"
status=()
step() {  # step NAME CMD...: run, record rc and seconds, never stop the job
  local name=$1; shift
  local t0; t0=$(date +%s.%N)
  "$@"
  local rc=$?
  local dt; dt=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN{printf "%.1f", b-a}')
  status+=("$name rc=$rc ${dt}s")
  echo "$name: rc=$rc wall=${dt}s" >> "$OUT/bench-${N}gpu.time.txt"
}

N=$("$PY" -c "import torch; print(torch.cuda.device_count())" 2>/dev/null || echo 0)
nvidia-smi --query-gpu=index,name,driver_version,power.limit,pcie.link.gen.max,pcie.link.width.max \
  --format=csv > "$OUT/nvidia-smi.txt" 2>&1
nvidia-smi topo -m >> "$OUT/nvidia-smi.txt" 2>&1
NPROC=()
[ "$N" -ge 2 ] && NPROC=(--nproc "$N")
: > "$OUT/bench-${N}gpu.time.txt"

# COLUMNS=100: the width the golden tests render at (a file is not a terminal).
step bench-all-text bash -c "COLUMNS=100 $PY -m gpudoctor bench all ${NPROC[*]} > '$OUT/bench-${N}gpu.txt' 2>> '$OUT/bench-${N}gpu.stderr.txt'"
step bench-all-json bash -c "$PY -m gpudoctor bench all --json ${NPROC[*]} > '$OUT/bench-${N}gpu.json' 2>> '$OUT/bench-${N}gpu.stderr.txt'"
# Evidence that N = 8192 saturates: bf16 at three sizes (about 8 s).
step matmul-sizes bash -c "$PY -m gpudoctor bench matmul --dtypes bf16,fp8 --sizes 4096,8192,16384 --json > '$OUT/bench-matmul-sizes-${N}gpu.json' 2>> '$OUT/bench-${N}gpu.stderr.txt'"
step pytest-gpu bash -c "$PY -m pytest -m gpu -q -s -p no:cacheprovider tests/gpu/test_bench_gpu.py > '$OUT/pytest-gpu-${N}gpu.txt' 2>&1"

echo "== summary ($N GPU)"
printf '%s\n' "${status[@]}"
echo "(bench exits 1 when a figure is LOW: read the table)"
tail -n 4 "$OUT/pytest-gpu-${N}gpu.txt" 2>/dev/null
grep -E "figures:|bf16|h2d_pinned|all_reduce +1 GiB" "$OUT/bench-${N}gpu.txt" 2>/dev/null | head -8
