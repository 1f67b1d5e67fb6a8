#!/usr/bin/env bash
# The command line against a real (sim/) job: the library's banner writes NCCL's version as the
# reports do (2.28.9), `autoha status` shows the running job's communicator as running, a job
# killed with SIGKILL 12 s in still leaves its reports (the first interval write comes 10 s after
# the first communicator, not AUTOHA_REPORT_INTERVAL_S), and `autoha status` on its credentials
# then says the job ended (text, and one JSON object under --json), exit 1.
#   check_cli_job.sh NCCLSIM_RUN TRAIN_JOB LIBAUTOHA AUTOHA_CLI SIMLIB_DIR
set -u
run=$1 job=$2 lib=$3 cli=$4 simlib=$5
. "$(dirname "$0")/../common/e2e_env.sh"
fail=0
log=$tmp/job.log cred=$tmp/hub.cred
# 2 ranks, 1000 paced steps (100 ms each): far longer than the test; killed at 12 s.
AUTOHA_LOG=info AUTOHA_REPORT="$tmp/reports/r-%p.json" AUTOHA_STATUS_FILE="$cred" \
  LD_PRELOAD="$lib" setsid "$run" -n 2 -- "$job" --iters 1000 --pace-us 100000 >"$log" 2>&1 &
pid=$!
start=$(date +%s)
for _ in $(seq 100); do [ -s "$cred" ] && break; sleep 0.1; done
[ -s "$cred" ] || { echo "FAIL: no credentials file after 10 s"; tail -5 "$log"; fail=1; }
sleep 2 # a few steps: the communicator has made progress
out=$("$cli" status "$cred" 2>&1) || { echo "FAIL: status of the running job exited $?: $out"; fail=1; }
grep -qE "^communicator 0x[0-9a-f]{16}: 2 ranks, running, last progress" <<<"$out" ||
  { echo "FAIL: the running job's communicator is not shown running:"; echo "$out"; fail=1; }
grep -q "verdict" <<<"$out" && { echo "FAIL: a complete verdict is shown:"; echo "$out"; fail=1; }
n=$(grep -cE "autoha [^ ]+ enabled: mode [a-z]+, NCCL 2\.28\.9" "$log")
[ "$n" = 2 ] || { echo "FAIL: $n of 2 banners name NCCL 2.28.9:"; grep "enabled: mode" "$log"; fail=1; }
sleep $((start + 12 - $(date +%s)))
kill -KILL -- -"$pid" 2>/dev/null
wait "$pid" 2>/dev/null
n=$(find "$tmp/reports" -name 'r-*.json' 2>/dev/null | wc -l)
[ "$n" = 2 ] || { echo "FAIL: $n of 2 reports on disk after SIGKILL at 12 s"; fail=1; }
out=$("$cli" status "$cred" 2>&1) && { echo "FAIL: status of the ended job exited 0"; fail=1; }
grep -q "the job's hub at 127.0.0.1:[0-9]* is gone: the job ended, or its rank 0 process died" <<<"$out" ||
  { echo "FAIL: status of the ended job said: $out"; fail=1; }
out=$("$cli" status --json "$cred" 2>/dev/null)
python3 -c 'import json, sys; d = json.loads(sys.argv[1]); assert "is gone" in d["error"], d' "$out" ||
  { echo "FAIL: status --json of the ended job printed: $out"; fail=1; }
[ $fail = 0 ] && echo "PASS: banner NCCL 2.28.9; running shown; 2 reports after SIGKILL at 12 s; ended job named"
exit $fail
