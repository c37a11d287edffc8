#!/usr/bin/env bash
# Corpus ground truth (issue 15): for each script of benchmarks/results/corpus/corpus-verdicts.json
# (call 1, committed first) with a WARN/ERROR verdict, the prescribed fix applied by hand to a
# copy (benchmarks/corpus/fixes.py), original and patched run interleaved A B A B under the same
# `gpudoctor run --steps 60`, on one H200 (kind: nvidia-h200). Budget: 560 s; ab.py starts no
# pair past AB_BUDGET_S (default 480 s; estimate per pair: 4 x the script's call-1 wall time)
# and lists what it left in corpus-ab.md ("Not run"); run those in a second call with
# AB_ONLY=name,name. AB_FIX=name=kind overrides the fix chosen from the verdict; AB_ARGS adds
# arguments (the CPU check: "--cpu --steps 8"). AB_STEPS sets `gpudoctor run --steps` (default 60;
# dcgan's 16-step epochs want 200, so that ~10 epoch boundaries fall in the steady steps).
# Carry .corpus.
# Outputs under $JOB_OUT, and where to commit them:
#   corpus-ab.json, corpus-ab.md   -> benchmarks/results/corpus/ (a second call: corpus-ab-2.*)
#   runs-ab/<script>/<fix>/<A|B><round>/, logs-ab/  (evidence: records, no traces)
#   ab-runs.tgz: the whole run directories of the A/B (traces included; AB_TAR_TRACES=0 leaves
#   them out), so that they can be brought back and re-diagnosed
set -uo pipefail
PY=${PYTHON:-python3}
OUT=${JOB_OUT:?set JOB_OUT}
mkdir -p "$OUT"
source "$(dirname "${BASH_SOURCE[0]}")/../step.sh"

WORK="${TMPDIR:-/tmp}/gpudoctor-corpus-ab"
step ab "$PY" benchmarks/corpus/ab.py --verdicts "${AB_VERDICTS:-benchmarks/results/corpus/corpus-verdicts.json}" \
  --out "$OUT" --corpus .corpus --work "$WORK" --steps "${AB_STEPS:-60}" \
  --rounds "${AB_ROUNDS:-2}" --budget-s "${AB_BUDGET_S:-480}" \
  ${AB_ONLY:+--only "$AB_ONLY"} ${AB_FIX:+--fix "$AB_FIX"} ${AB_ARGS:-}

if [ -d "$WORK/runs-ab" ]; then
  excl=(); [ "${AB_TAR_TRACES:-1}" = 0 ] && excl=(--exclude='trace*')
  step tar tar czf "$OUT/ab-runs.tgz" "${excl[@]}" -C "$WORK" runs-ab
fi

echo "=== summary"
cat "$OUT/corpus-ab.md" 2>/dev/null
printf '%s\n' "${status[@]}"
