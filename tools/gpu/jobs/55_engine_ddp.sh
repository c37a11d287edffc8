#!/usr/bin/env bash
# 55_engine_ddp — gpudoctor.train DDP on TWO H200s: GPT-2 124M (bf16, eager) through the engine with
# 1 process, then with 2 processes under torchrun; the JSON gets the 2-vs-1 ratio (goal >= 1.85).
# Budget: 120 s (two torchrun launches of ~40 s each: start-up, 10 warm-up + 30 timed steps).
# Writes to $JOB_OUT: ddp-1gpu.txt, ddp-2gpu.txt, peers-2xh200.json.
# Commit $JOB_OUT/peers-2xh200.json as benchmarks/results/peers-2xh200.json.
set -u
cd "$(dirname "$0")/../../.."
export PYTHONPATH="$PWD/src${PYTHONPATH:+:$PYTHONPATH}"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
: "${JOB_OUT:=/tmp/out/55_engine_ddp}"
mkdir -p "$JOB_OUT"
out="$JOB_OUT/peers-2xh200.json"
rm -f "$out"
start=$(date +%s)
for n in 1 2; do
  timeout 55 python3 -m torch.distributed.run --standalone --nproc_per_node "$n" benchmarks/peers.py --part ddp \
    --out "$out" >"$JOB_OUT/ddp-${n}gpu.txt" 2>&1
  echo "ddp ${n} GPU(s) rc=$? ($(( $(date +%s) - start )) s)"
done
echo "--- summary"
for n in 1 2; do grep -E "gpudoctor_ddp|ddp 2 GPUs" "$JOB_OUT/ddp-${n}gpu.txt" | tail -n 3; done
