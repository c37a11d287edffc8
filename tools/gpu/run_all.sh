#!/usr/bin/env bash
# Run GPU verification jobs on a device machine and pack their outputs into one archive.
#   bash tools/gpu/run_all.sh [JOB ...]      (default: every tools/gpu/jobs/*.sh)
# Each job runs from the repository root with JOB_OUT set to its own output folder and
# PYTHONPATH=src; its output folder ends up in $OUT/gpu-results.tgz as <job>/...
set -uo pipefail
cd "$(dirname "$0")/../.."
export PYTHONPATH="$PWD/src${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
results="${OUT:-/tmp/out}/gpu-results"
mkdir -p "$results"
jobs=("$@")
[ ${#jobs[@]} -gt 0 ] || jobs=(tools/gpu/jobs/*.sh)
for job in "${jobs[@]}"; do
  name=$(basename "$job" .sh)
  export JOB_OUT="$results/$name"
  mkdir -p "$JOB_OUT"
  echo "=== $name ($(date +%T))"
  start=$(date +%s)
  bash "$job" >"$JOB_OUT/job.log" 2>&1
  rc=$?
  echo "=== $name rc=$rc in $(( $(date +%s) - start ))s"
  tail -n 15 "$JOB_OUT/job.log"
done
tar -czf "${OUT:-/tmp/out}/gpu-results.tgz" -C "$(dirname "$results")" gpu-results
ls -la "${OUT:-/tmp/out}"
