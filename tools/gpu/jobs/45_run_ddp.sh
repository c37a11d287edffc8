#!/usr/bin/env bash
# gpudoctor run on the torchrun workloads with 2 ranks on 2 GPUs (kind nvidia-h200-x2). Budget: 150 s.
# Commit: fixtures/<workload>/ -> tests/fixtures/runs/<workload>-2gpu/ ; run_verdicts.* -> bench/results/run_verdicts-2gpu.*
set -u
python3 bench/run_verdicts.py --out "$JOB_OUT" --size small --steps 60 --timeout 60 \
  --only ddp_no_set_epoch,ddp_all_on_gpu0,straggler --pack "$JOB_OUT/fixtures"
cat "$JOB_OUT/run_verdicts.txt" 2>/dev/null
du -sh "$JOB_OUT"/fixtures/* 2>/dev/null
