# Sourced by the jobs in tools/gpu/jobs/: `step NAME CMD...` runs a command, records its exit code
# and time in the `status` array, and never stops the job (one failing step must not lose the rest).
status=()
step() {
  local name=$1; shift
  local t0=$SECONDS
  "$@"
  local rc=$?
  status+=("$name rc=$rc $((SECONDS - t0))s")
}
