#!/usr/bin/env bash
# The end of a job as frameworks shape it: every rank destroys its communicators, rank 0's process
# (which hosts the coordinator's hub) exits at once, and the others linger (interpreter shutdown,
# a checkpoint upload) for longer than the client's one-second grace before it warns about a lost
# hub. A process whose communicators are all destroyed has left them at the hub, so the lost hub is
# no loss to it: it may say so at info, never warn. The job runs 3 processes x 2 ranks (one thread
# per GPU, as nccl-tests and JAX drive them) in tune mode.
#
#   run_teardown.sh LAUNCHER JOB LIBAUTOHA SIMLIB
set -uo pipefail
launcher=$1 job=$2 lib=$3 simlib=$4
. "$(dirname "$0")/../common/e2e_env.sh"
unset AUTOHA_MODE AUTOHA_OVERRIDE AUTOHA_PROFILE NCCL_TUNER_PLUGIN AUTOHA_LOG
LD_PRELOAD=$lib AUTOHA_MODE=tune AUTOHA_LOG=info AUTOHA_REPORT=off timeout 120 \
  "$launcher" -n 3 -- "$job" --threads 2 --iters 30 --linger-ms 2500 >"$tmp/out" 2>"$tmp/err"
rc=$?
[ "$rc" = 0 ] || { echo "FAIL: the job exited $rc"; tail -20 "$tmp/err"; exit 1; }
n=$(grep -c '^checksum' "$tmp/out")
[ "$n" = 6 ] || { echo "FAIL: $n checksum lines, expected 6"; exit 1; }
# The shape happened: a lingering process saw the hub go.
grep -q 'connection to hub .* lost' "$tmp/err" ||
  { echo "FAIL: no process logged the hub's loss (did rank 0's process outlive the others?)"; tail -20 "$tmp/err"; exit 1; }
if grep -E ' autoha (WARN|ERROR) ' "$tmp/err" | grep -c . >/dev/null; then
  echo "FAIL: a warning or error at the end of a job that ran well:"; grep -E ' autoha (WARN|ERROR) ' "$tmp/err" | head; exit 1
fi
echo "PASS: 6 ranks completed; the processes that outlived the hub logged its loss at info only"
