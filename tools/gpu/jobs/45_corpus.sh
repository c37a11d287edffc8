#!/usr/bin/env bash
# Corpus verdicts (issue 15, "a real-world corpus"): `gpudoctor run --steps 60` on 12 public
# training scripts, unmodified, on one H200 (kind: nvidia-h200). Budget: 540 s (estimate ~250 s:
# ~10 s of gpudoctor/torch/CUDA start per run as in benchmarks/results/run_verdicts.json, plus 65
# steps of each script; benchmarks/corpus/README.md). Needs the git-ignored .corpus folder made by
# `bash benchmarks/corpus/prepare.sh` on the development machine and carried into the call
# (run's carry: [".corpus"]). No internet needed: make_data.py writes the synthetic data.
# CORPUS_ONLY=a,b runs a subset; CORPUS_ARGS adds arguments (the CPU check: "--cpu --steps 8").
# Run from the repo root with PYTHONPATH=src and JOB_OUT set (tools/gpu/run_all.sh does both).
# Outputs under $JOB_OUT, and where to commit them:
#   corpus-verdicts.json, corpus-verdicts.md   -> benchmarks/results/corpus/
#   runs/<script>/ (records, no traces), consoles/<script>.txt, logs/<script>.log  (evidence)
set -uo pipefail
PY=${PYTHON:-python3}
OUT=${JOB_OUT:?set JOB_OUT}
mkdir -p "$OUT"
source "$(dirname "${BASH_SOURCE[0]}")/../step.sh"

nvidia-smi -L > "$OUT/nvidia-smi.txt" 2>&1
step corpus "$PY" benchmarks/corpus/run_corpus.py --out "$OUT" --corpus .corpus \
  --work "${TMPDIR:-/tmp}/gpudoctor-corpus-work" ${CORPUS_ONLY:+--only "$CORPUS_ONLY"} ${CORPUS_ARGS:-}

echo "=== summary"
cat "$OUT/corpus-verdicts.md" 2>/dev/null
printf '%s\n' "${status[@]}"
