#!/usr/bin/env bash
# Count how often a finished 2-rank gloo job aborts at interpreter exit ("terminate called without
# an active exception", PyTorch issue 190489). Runs the FSDP2 resume job of
# tests/distributed/test_train_ddp.py N times (one crashed attempt first, then N resumed runs that
# train, save and leave through Trainer.close()).
#
#   bash tools/stress_gloo_exit.sh 80 [SRC_DIR]
#
# SRC_DIR (default: this checkout's src) lets a modified copy of the package be measured the same
# way. Prints one line per run and a total; a run's log is kept under $WORK/runN when it fails.
set -u
N=${1:-40}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
SRC=${2:-$ROOT/src}
WORKER=$ROOT/tests/distributed/train_worker.py
WORK=$(mktemp -d)
export PYTHONPATH=$SRC OMP_NUM_THREADS=1 CUDA_VISIBLE_DEVICES= PYTHONFAULTHANDLER=1
ARGS=(--strategy fsdp --ckpt-every 2 --crash-at 6)
mkdir -p "$WORK/template"
python -m torch.distributed.run --standalone --nproc_per_node 2 "$WORKER" "$WORK/template" "${ARGS[@]}" \
  > "$WORK/template/crash.log" 2>&1  # rank 0 dies at step 6: the checkpoint the runs resume from
failed=0
for i in $(seq 1 "$N"); do
  run=$WORK/run$i
  cp -r "$WORK/template" "$run"
  python -m torch.distributed.run --standalone --nproc_per_node 2 "$WORKER" "$run" "${ARGS[@]}" > "$run/log" 2>&1
  rc=$?
  if [ $rc -ne 0 ]; then
    failed=$((failed + 1))
    echo "run $i: exit $rc ($(grep -m1 -o 'terminate called.*' "$run/log" || echo 'see log')) -> $run/log"
  else
    rm -rf "$run"
  fi
done
echo "aborted: $failed of $N runs"
