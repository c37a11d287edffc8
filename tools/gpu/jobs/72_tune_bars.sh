#!/usr/bin/env bash
# 72_tune_bars — issue 17's bars on one H200, one case per call (each within ~8 minutes):
#   TUNE_BAR=resnet50 bash tools/gpu/run_all.sh 72_tune_bars:590
#   TUNE_BAR=gpt124m  bash tools/gpu/run_all.sh 72_tune_bars:590
#   TUNE_BAR=script   bash tools/gpu/run_all.sh 72_tune_bars:490     (needs .public/imagenet_main.py, below)
#   TUNE_BAR_TIMEOUT (s, default 570) caps the benchmark; the tune part's JSON is written before the
#   comparison, so a cut comparison keeps it. TUNE_SCRIPT_ARCH (default resnet18) is the script's -a.
# resnet50 / gpt124m: `tune all` with its default budget (420 s), then the written config vs the starting
#   one vs the engine's defaults as training runs them (3 interleaved rounds, ~4 s each): bars >= 1.0 / >= 1.2.
# script: `tune all --script` on pytorch/examples imagenet/main.py -a ARCH --dummy -b 256 -j 4,
#   budget TUNE_SCRIPT_BUDGET_S (420 s): the --try spec must hold bf16 (or fp16), gain >= 1.3, spreads shown.
#   The script is not committed: before the call, in the repository root,
#     mkdir -p .public && git --git-dir=../.mirror/pytorch+examples/repo show HEAD:imagenet/main.py \
#       > .public/imagenet_main.py && echo /.public/ >> .git/info/exclude
#   and pass carry [".public"] to the device call.
# Dry run on a CPU: TUNE_BAR=... TUNE_BAR_SMOKE=1 (tiny models; figures mean nothing).
# TUNE_BARS_PER_CALL=1: the model class made per call (tune_bars.py --per-call-class); the JSON's
#   "compile_watch" counts compile trials, dynamo resets and trials dynamo ran eager (must be 0).
# Writes to $JOB_OUT: tune-bars-<case>.json (every trial, the bars) -> benchmarks/results/tune-bars-<case>-h200.json,
#   tune-bars-<case>.log (stderr: the plan, each stage, one line per setting), summary.txt (stdout).
set -u
cd "$(dirname "$0")/../../.."
export PYTHONPATH="$PWD/src${PYTHONPATH:+:$PYTHONPATH}" COLUMNS=120 CUDA_VISIBLE_DEVICES=0
: "${JOB_OUT:=/tmp/out/72_tune_bars}" "${TUNE_BAR:=resnet50}" "${TUNE_SCRIPT_BUDGET_S:=420}" "${TUNE_BAR_SMOKE:=0}"
: "${TUNE_BAR_TIMEOUT:=570}" "${TUNE_SCRIPT_ARCH:=resnet18}"
mkdir -p "$JOB_OUT"
extra=()
[ "$TUNE_BAR_SMOKE" = 1 ] && extra+=(--smoke)
[ "$TUNE_BAR" = script ] && extra+=(--budget-s "$TUNE_SCRIPT_BUDGET_S" --script-path .public/imagenet_main.py --arch "$TUNE_SCRIPT_ARCH")
if [ "$TUNE_BAR" = script ] && [ "$TUNE_BAR_SMOKE" != 1 ] && [ ! -f .public/imagenet_main.py ]; then
  echo "missing .public/imagenet_main.py: see this job's header" | tee "$JOB_OUT/summary.txt"; exit 1
fi
start=$SECONDS
timeout -k 5 "$TUNE_BAR_TIMEOUT" python3 benchmarks/tune_bars.py --case "$TUNE_BAR" --out "$JOB_OUT/tune-bars-$TUNE_BAR.json" "${extra[@]}" \
  >"$JOB_OUT/summary.txt" 2>"$JOB_OUT/tune-bars-$TUNE_BAR.log"
echo "rc=$? in $((SECONDS - start)) s" | tee -a "$JOB_OUT/summary.txt"
cat "$JOB_OUT/summary.txt"; tail -n 25 "$JOB_OUT/tune-bars-$TUNE_BAR.log"
exit 0
