#!/usr/bin/env bash
# Run GPU verification jobs on a device machine and pack their outputs into one archive.
#   bash tools/gpu/run_all.sh JOB[:SECONDS] ...      e.g. 10_check:40 30_bench:90
# Each job (tools/gpu/jobs/JOB.sh) runs from the repository root with JOB_OUT set to its own
# output folder and PYTHONPATH=src, killed after SECONDS (default 300). The archive
# $OUT/gpu-results.tgz is rewritten after every job, so a call cut short keeps what finished.
set -uo pipefail
cd "$(dirname "$0")/../.."
export PYTHONPATH="$PWD/src${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
out="${OUT:-/tmp/out}"
results="$out/gpu-results"
mkdir -p "$results"
nvidia-smi > "$results/nvidia-smi.txt" 2>&1
for spec in "$@"; do
  name=${spec%%:*}
  budget=300
  [ "$spec" != "$name" ] && budget=${spec#*:}
  export JOB_OUT="$results/$name"
  mkdir -p "$JOB_OUT"
  echo "=== $name (budget ${budget}s, $(date +%T))"
  start=$(date +%s)
  timeout -k 5 "$budget" bash "tools/gpu/jobs/$name.sh" >"$JOB_OUT/job.log" 2>&1
  rc=$?
  echo "=== $name rc=$rc in $(( $(date +%s) - start ))s"
  tail -n 12 "$JOB_OUT/job.log" | cut -c1-220
  tar -czf "$out/gpu-results.tgz.tmp" -C "$out" gpu-results && mv "$out/gpu-results.tgz.tmp" "$out/gpu-results.tgz"
done
rm -rf "$results"
ls -la "$out"
