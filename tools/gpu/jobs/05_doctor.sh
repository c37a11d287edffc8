#!/usr/bin/env bash
# gpudoctor doctor end to end on the GPU machine (issue 8 bar: <= 90 s on one H200). Budget: 110 s.
# Needs the report's Bokeh on that machine: carry .whl (bokeh, tornado, xyzservices wheels).
# Commit: doctor.txt -> docs/examples/doctor-h200.txt; doctor/ run dirs -> the report screenshot.
set -u
if ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl \
    && export PYTHONPATH="$PYTHONPATH:/tmp/site"
fi
start=$(date +%s.%N)
COLUMNS=100 python3 -m gpudoctor doctor --out "$JOB_OUT/doctor" > "$JOB_OUT/doctor.txt" 2> "$JOB_OUT/doctor.stderr.txt"
rc=$?
end=$(date +%s.%N)
echo "gpudoctor doctor rc=$rc wall_s=$(python3 -c "print(round($end-$start,1))")" | tee "$JOB_OUT/doctor.time.txt"
cat "$JOB_OUT/doctor.txt"
rm -f "$JOB_OUT"/doctor/*/trace-rank*.json
