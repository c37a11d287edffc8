#!/usr/bin/env bash
# gpudoctor fix (issue 24) on one H200 (kind: nvidia-h200). Three parts, one device call each:
#   FIX_PART=readme (default): the README's data-loader-bound doctor example (basic_user, small)
#     patched by `gpudoctor fix --write`, then original vs fixed interleaved, 3 rounds of
#     `gpudoctor run --steps 60`. Bar: fixed >= 3x the original's throughput. Budget: 420 s.
#   FIX_PART=planted: `gpudoctor fix --write` on the one-GPU planted workloads (basic_user,
#     fp32_convnet, tiny_batch, item_every_step, pageable_copies, clean), then `run --try` with the
#     knobs of each one's top finding. Bar: the fix's gain >= the --try gain minus its noise; clean
#     gets no patch. Budget: 560 s (FIX_BUDGET_S, FIX_ONLY as below).
#   FIX_PART=corpus: `gpudoctor fix --write` on each corpus script with a WARN verdict
#     (benchmarks/results/corpus/corpus-verdicts.json), from a fresh copy; every change measured on its
#     own against the original. Bar: faster by at least the hand fix's A/B gain minus its noise
#     (corpus-ab-*.json). Budget: 560 s; fix_corpus.py starts no script past FIX_BUDGET_S (default
#     420 s) and lists what it left ("not run"): run those with FIX_ONLY=name,name. Carry .corpus.
#     FIX_REF=try: after each fix, `run --try` of its baseline's top testable finding (the loader
#     knobs, compile, ...) on a fresh copy in the same call is the bar's reference, instead of the
#     hand fix's A/B from another call (a data-bound baseline moves more between calls than its
#     in-call noise; a launch-bound row's hand fix, a larger batch, is advice and never patched).
#     About doubles each script's time.
# Needs libcst (not in the device image): carry .whl with the wheels of libcst and its
# dependencies for the device's python (pip download libcst pyyaml typing_inspect mypy_extensions
# typing_extensions --only-binary=:all: --python-version 3.X -d .whl); they go to /tmp/site.
# Outputs under $JOB_OUT, and where to commit them:
#   fix-bars.json, fix-bars.md  -> benchmarks/results/fix/<part>.{json,md} (corpus-2.* for a second call)
#   logs-fix/ (every fix's JSON and console; evidence)
set -uo pipefail
PY=${PYTHON:-python3}
OUT=${JOB_OUT:?set JOB_OUT}
mkdir -p "$OUT"
source "$(dirname "${BASH_SOURCE[0]}")/../step.sh"
if ls .whl/*.whl >/dev/null 2>&1; then
  "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl \
    && export PYTHONPATH="$PYTHONPATH:/tmp/site"
fi
if ! "$PY" -c "import libcst" 2>"$OUT/libcst.txt"; then
  echo "libcst is missing on this machine: carry .whl with its wheels (see this file's header)"; exit 3
fi
nvidia-smi -L > "$OUT/nvidia-smi.txt" 2>&1
if [ "${FIX_PART:-readme}" = readme ]; then
  step readme "$PY" benchmarks/corpus/fix_corpus.py --readme --out "$OUT" --work "${TMPDIR:-/tmp}/gpudoctor-fix" \
    --steps "${FIX_STEPS:-60}" --repeats "${FIX_REPEATS:-2}" --rounds "${FIX_ROUNDS:-3}" ${FIX_ARGS:-}
elif [ "$FIX_PART" = planted ]; then
  step planted "$PY" benchmarks/corpus/fix_corpus.py --planted --out "$OUT" --work "${TMPDIR:-/tmp}/gpudoctor-fix" \
    --steps "${FIX_STEPS:-60}" --repeats "${FIX_REPEATS:-2}" --budget-s "${FIX_BUDGET_S:-420}" \
    ${FIX_ONLY:+--only "$FIX_ONLY"} ${FIX_ARGS:-}
else
  step corpus "$PY" benchmarks/corpus/fix_corpus.py --corpus .corpus --out "$OUT" --work "${TMPDIR:-/tmp}/gpudoctor-fix" \
    --steps "${FIX_STEPS:-60}" --repeats "${FIX_REPEATS:-2}" --budget-s "${FIX_BUDGET_S:-420}" \
    --reference "${FIX_REF:-hand}" ${FIX_ONLY:+--only "$FIX_ONLY"} ${FIX_ARGS:-}
fi
echo "=== summary"
cat "$OUT/fix-bars.md" 2>/dev/null
printf '%s\n' "${status[@]}"
