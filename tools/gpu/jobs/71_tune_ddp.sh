#!/usr/bin/env bash
# 71_tune_ddp — `gpudoctor tune ddp` on two H200s: does it pick the faster of with/without a gradient
# compression hook (issue 10's 2-GPU bar)?
# Run:    bash tools/gpu/run_all.sh 71_tune_ddp:200      (kind nvidia-h200-x2; one device call)
# Budget: TUNE_DDP_JOB_S (default 190 s; give run_all 10 s more). First the CLI under torchrun,
#   `tune ddp --json` at the basic user's batch (128 per rank), killed at 60 s; then
#   benchmarks/tune_ddp.py under torchrun, killed at what is left minus 5 s; its --budget-s is 30 s less (it
#   starts no new batch size that would end after it): per batch in TUNE_DDP_BATCHES (128,1024),
#   `tune ddp` + an independent A/B check of no hook / fp16 / bf16 (4 interleaved rounds).
# Dry run on a CPU: TUNE_BENCH_SMOKE=1 TUNE_DDP_BATCHES=32,64 (tiny CNN, gloo).
# Writes to $JOB_OUT:
#   tune-ddp-2xh200.json      per batch: every trial's rate, the pick, ranks agree, the A/B check -> commit as
#                             benchmarks/results/tune-ddp-2xh200.json
#   tune-ddp-2xh200.txt       its summary (stdout)                          -> commit as benchmarks/results/tune-ddp-2xh200.txt
#   tune-ddp-cli-2gpu.json    the CLI's --json (rank 0's stdout)            -> commit as benchmarks/results/tune-ddp-cli-2xh200.json
#   *.log, *.toml             progress and the configs tune wrote (no need to commit)
#   timings.txt               wall time and rc of each step
set -u
cd "$(dirname "$0")/../../.."
export PYTHONPATH="$PWD/src${PYTHONPATH:+:$PYTHONPATH}" COLUMNS=120
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
: "${JOB_OUT:=/tmp/out/71_tune_ddp}" "${TUNE_DDP_JOB_S:=190}" "${TUNE_DDP_BATCHES:=128,1024}"
mkdir -p "$JOB_OUT"
timings="$JOB_OUT/timings.txt"
: >"$timings"
ngpu=$(python3 -c "import torch; print(torch.cuda.device_count())" 2>/dev/null || echo 0)
if [ "${TUNE_BENCH_SMOKE:-0}" = 1 ]; then
  echo "TUNE_BENCH_SMOKE=1: a dry run (tiny CNN; gloo on the CPU without GPUs); figures mean nothing"
elif [ "$ngpu" -lt 2 ]; then
  echo "71_tune_ddp needs 2 GPUs, $ngpu visible: nothing run" | tee "$timings"
  exit 0
else
  export CUDA_VISIBLE_DEVICES=0,1
fi
torchrun=(python3 -m torch.distributed.run --standalone --nproc_per_node 2)

record() {  # record NAME RC START COMMAND...
  printf '%-6s rc=%-3s %4d s  %s\n' "$1" "$2" "$((SECONDS - $3))" "${*:4}" | tee -a "$timings"
}

start=$SECONDS
timeout -k 5 60 "${torchrun[@]}" -m gpudoctor tune ddp --target benchmarks/tune_resnet18.py:target --json --steps 20 \
  --out "$JOB_OUT/tune-ddp-cli.toml" >"$JOB_OUT/tune-ddp-cli-2gpu.json" 2>"$JOB_OUT/tune-ddp-cli.log"
record cli $? "$start" "torchrun -m gpudoctor tune ddp --target benchmarks/tune_resnet18.py:target --json --steps 20"

kill_s=$((TUNE_DDP_JOB_S - SECONDS - 5))
bench_s=$((kill_s - 30))
start=$SECONDS
timeout -k 5 "$kill_s" "${torchrun[@]}" benchmarks/tune_ddp.py --out "$JOB_OUT/tune-ddp-2xh200.json" \
  --budget-s "$bench_s" --batches "$TUNE_DDP_BATCHES" --rounds 4 \
  >"$JOB_OUT/tune-ddp-2xh200.txt" 2>"$JOB_OUT/tune-ddp.log"
record bench $? "$start" "torchrun benchmarks/tune_ddp.py --budget-s $bench_s --batches $TUNE_DDP_BATCHES --rounds 4 (killed at ${kill_s}s)"

echo "--- summary ($SECONDS s)"
[ -s "$JOB_OUT/tune-ddp-cli-2gpu.json" ] && python3 -c "
import json, sys
r = json.load(open(sys.argv[1]))
for k in r['knobs']:
    print('cli:', k['knob'], '|', k['summary'])
    print('    ', '; '.join(f\"{t['setting'].replace('bucket_cap_mb=', '')} {t['samples_per_s'] or 0:,.0f}\" for t in k['trials']))
" "$JOB_OUT/tune-ddp-cli-2gpu.json" 2>&1 | cut -c1-220
if [ -s "$JOB_OUT/tune-ddp-2xh200.txt" ]; then
  grep -v '^  bucket_cap_mb' "$JOB_OUT/tune-ddp-2xh200.txt"
else
  echo "bench printed no summary; last lines of its log:"
  tail -n 5 "$JOB_OUT/tune-ddp.log"
fi
exit 0
