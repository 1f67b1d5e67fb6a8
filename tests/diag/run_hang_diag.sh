#!/usr/bin/env bash
# Hang localisation on 32 ranks over 4 simulated nodes, with libautoha.so preloaded in its default
# (observe) mode: for each case the issue names — (a) a rank whose host stops before a call
# (train_job --stall), (b) a rank whose collective never completes on its GPU (NCCLSIM_FAULT=hang),
# (c) a rank that issues a different collective (train_job --mismatch, hanging as real NCCL
# would) — every rank's process must log the one finding line naming the culprit within
# AUTOHA_HANG_S + 2 s of the fault (the 2 s stretched by the machine's measured pace,
# tests/common/pace.sh).
# Then `autoha status` on a running 16-rank job prints its table (and --json), and refuses a
# missing, malformed or wrong credentials file by name with a non-zero status.
#   run_hang_diag.sh NCCLSIM_RUN TRAIN_JOB LIBAUTOHA SIMLIB_DIR AUTOHA_CLI
set -u
run=$1 job=$2 lib=$3 simlib=$4 cli=$5
hang_s=3
work=$(mktemp -d)
export AUTOHA_REPORT="$work/reports/%h-%p.json" # not into the working folder
trap 'rm -rf "$work"' EXIT
now() { date +%s.%N; }
. "$(dirname "$0")/../common/pace.sh"

# case NAME FAULT_REGEX FINDING_REGEX ENV... -- JOB_ARGS...
check() {
  local name=$1 fault_re=$2 finding_re=$3
  shift 3
  local envs=()
  while [ "$1" != -- ]; do envs+=("$1"); shift; done
  shift
  local log=$work/$name.log
  env "${envs[@]}" AUTOHA_HANG_S=$hang_s NCCLSIM_TIMEOUT_S=120 NCCLSIM_RUN_GRACE_S=2 \
    LD_LIBRARY_PATH="$simlib" LD_PRELOAD="$lib" setsid "$run" -n 32 --nodes 4 -- "$job" --iters 6 "$@" \
    >"$log" 2>&1 &
  local pid=$! t0= t1= n=0
  for _ in $(seq 600); do # the fault strikes once the job runs (32 processes start in a few s)
    if grep -qE "$fault_re" "$log"; then t0=$(now); break; fi
    sleep 0.1
  done
  if [ -n "$t0" ]; then
    for _ in $(seq $(( (hang_s + 10) * 10 ))); do
      n=$(grep -cE "$finding_re" "$log")
      if [ "$n" -ge 32 ]; then t1=$(now); break; fi
      sleep 0.1
    done
  fi
  local pace
  pace=$(pace_factor) # while the job still runs
  kill -TERM -- -"$pid" 2>/dev/null
  wait "$pid" 2>/dev/null
  if [ -z "$t0" ]; then echo "FAIL $name: the fault never struck"; tail -20 "$log"; return 1; fi
  if [ -z "$t1" ]; then
    echo "FAIL $name: $n of 32 processes logged the finding"; grep -E "hang on|fault|stalls|issues" "$log" | head -5
    return 1
  fi
  local took
  took=$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.1f", b - a }')
  if ! awk -v t="$took" -v h="$hang_s" -v p="$pace" 'BEGIN { exit !(t <= h + 2 * p) }'; then
    echo "FAIL $name: the finding took $took s (bound $hang_s + 2 s x the machine's pace $pace)"; return 1
  fi
  if grep -E "hang on" "$log" | grep -vqE "$finding_re"; then
    echo "FAIL $name: another finding was logged:"; grep -E "hang on" "$log" | grep -vE "$finding_re" | head -3
    return 1
  fi
  echo "$name: 32 of 32 processes named the culprit $took s after the fault (AUTOHA_HANG_S=$hang_s)"
}

# AUTOHA_HEALTH_ACTION=abort: every process revokes its ranks of the communicator, the ranks
# waiting in it fail (by their own revoke, or because a peer that revoked is gone) and the launcher
# ends the stalled one: the job is over, non-zero, within AUTOHA_HANG_S + 5 s of the fault.
abort_case() {
  local log=$work/abort.log t0= t1= rc
  # (the launcher ends what is left 1 s after the first rank fails: torchrun's agent does at once)
  AUTOHA_HEALTH_ACTION=abort AUTOHA_HANG_S=$hang_s NCCLSIM_TIMEOUT_S=120 NCCLSIM_RUN_GRACE_S=1 \
    LD_LIBRARY_PATH="$simlib" LD_PRELOAD="$lib" setsid "$run" -n 32 --nodes 4 -- "$job" --iters 6 \
    --stall 13:7 >"$log" 2>&1 &
  local pid=$!
  for _ in $(seq 600); do
    if grep -q "rank 13 stalls before collective #7" "$log"; then t0=$(now); break; fi
    sleep 0.1
  done
  for _ in $(seq $(( (hang_s + 20) * 10 ))); do
    if ! kill -0 "$pid" 2>/dev/null; then t1=$(now); break; fi
    sleep 0.1
  done
  kill -KILL -- -"$pid" 2>/dev/null
  wait "$pid"
  rc=$?
  [ -n "$t0" ] && [ -n "$t1" ] || { echo "FAIL abort: the job did not end (fault seen: ${t0:-no})"; return 1; }
  local took n_rev n_fail n_why
  took=$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.1f", b - a }')
  n_rev=$(grep -c "revoked 1 local rank (AUTOHA_HEALTH_ACTION=abort)" "$log")
  n_fail=$(grep -cE "^train_job: rank [0-9]+: .* failed" "$log")
  # A waiting rank fails because its own process revoked, or — when the finding reached it later
  # than a peer that revoked and exited (a loaded machine) — because that peer is gone; either is
  # the abort's doing, nothing else may fail a call.
  n_why=$(grep -E "^train_job: rank [0-9]+: .* failed" "$log" |
    grep -cE "revoked while the call waited|exited; its peers cannot complete the call|aborted")
  [ "$rc" -ne 0 ] || { echo "FAIL abort: the job exited 0"; return 1; }
  [ "$n_rev" -ge 1 ] || { echo "FAIL abort: no process revoked"; return 1; }
  [ "$n_fail" = 31 ] || { echo "FAIL abort: $n_fail of the 31 waiting ranks failed their call"; return 1; }
  [ "$n_why" = 31 ] || { echo "FAIL abort: $((31 - n_why)) calls failed for another reason:"
    grep -E "^train_job: rank [0-9]+: .* failed" "$log" |
      grep -vE "revoked while|exited; its peers|aborted" | head -3; return 1; }
  awk -v t="$took" -v h="$hang_s" 'BEGIN { exit !(t <= h + 5) }' ||
    { echo "FAIL abort: the job ended $took s after the fault (bound $hang_s + 5 s)"; return 1; }
  # the ranks that failed by their own revoke wrote their report at exit, with the finding in its
  # health section (but those the launcher ended: on a loaded machine some were still exiting)
  local n_rep n_ended
  n_rep=$(grep -l '"kind": "missing"' "$work"/reports/*.json 2>/dev/null | wc -l)
  n_ended=$(sed -nE 's/^ncclsim-run: ([0-9]+) rank\(s\) still running .*/\1/p' "$log" | head -1)
  local want=$(($(grep -c "revoked while the call waited" "$log") - ${n_ended:-0}))
  [ "$n_rep" -ge "$want" ] && [ "$n_rep" -ge 1 ] ||
    { echo "FAIL abort: $n_rep reports hold the finding ($want expected)"; return 1; }
  # the hub's credentials went beside the reports (AUTOHA_REPORT's folder), readable by the user only
  local cred
  cred=$(ls "$work"/reports/hub-*.cred 2>/dev/null | head -1)
  [ -n "$cred" ] && [ "$(stat -c %a "$cred")" = 600 ] ||
    { echo "FAIL abort: no hub credentials (mode 600) beside the reports: $(ls "$work"/reports | head -3)"; return 1; }
  echo "abort: $n_rev of 32 processes revoked, 31 ranks failed (their reports hold the finding)," \
    "job over (status $rc) $took s after the fault"
}

status_case() {
  local log=$work/status.log cred=$work/hub.cred out rc
  AUTOHA_STATUS_FILE="$cred" AUTOHA_HANG_S=$hang_s NCCLSIM_TIMEOUT_S=120 LD_LIBRARY_PATH="$simlib" \
    LD_PRELOAD="$lib" setsid "$run" -n 16 --nodes 2 -- "$job" --iters 6 --stall 5:7 >"$log" 2>&1 &
  local pid=$! ok=1
  for _ in $(seq 300); do [ "$(grep -cE 'ERROR [a-z]+: hang on comm' "$log")" -ge 16 ] && break; sleep 0.1; done
  out=$("$cli" status "$cred" 2>&1); rc=$?
  [ $rc = 0 ] || { echo "FAIL status: exit $rc: $out"; ok=0; }
  [ "$(stat -c %a "$cred")" = 600 ] || { echo "FAIL status: credentials mode $(stat -c %a "$cred"), not 600"; ok=0; }
  grep -qE "^communicator 0x[0-9a-f]{16}: 16 ranks, hung, last progress" <<<"$out" || { echo "FAIL status: no communicator line"; ok=0; }
  grep -qE "^  finding: hang on comm [0-9a-f]+: rank 5 " <<<"$out" || { echo "FAIL status: no finding line"; ok=0; }
  [ "$(grep -cE '^ +[0-9]+  [0-9.]+ +[0-9]+ +[0-9]+  (busy|idle) ' <<<"$out")" = 16 ] ||
    { echo "FAIL status: not 16 rank rows:"; echo "$out"; ok=0; }
  grep -qE '^ +5  [0-9.]+ +[0-9]+ +5  idle ' <<<"$out" || { echo "FAIL status: rank 5 is not shown idle"; ok=0; }
  out=$("$cli" status "$cred" --json 2>&1)
  [ "$(grep -o '"rank": ' <<<"$out" | wc -l)" = 16 ] && grep -q '"finding": {"kind": 1, "text": "hang on' <<<"$out" ||
    { echo "FAIL status --json: $out" | head -3; ok=0; }
  out=$("$cli" status "$work/none.cred" 2>&1) && { echo "FAIL status: a missing file exited 0"; ok=0; }
  grep -q "cannot read the credentials $work/none.cred: cannot open" <<<"$out" || { echo "FAIL status: $out"; ok=0; }
  echo "not credentials" >"$work/bad.cred"
  out=$("$cli" status "$work/bad.cred" 2>&1) && { echo "FAIL status: a malformed file exited 0"; ok=0; }
  grep -q "is not an autoha credentials file ('not credentials'" <<<"$out" || { echo "FAIL status: $out"; ok=0; }
  sed -E 's/ [0-9a-f]{32}$/ 00000000000000000000000000000000/' "$cred" >"$work/wrong.cred"
  out=$("$cli" status "$work/wrong.cred" 2>&1) && { echo "FAIL status: a wrong secret exited 0"; ok=0; }
  grep -q "cannot reach the job's hub: waiting for WELCOME" <<<"$out" || { echo "FAIL status: $out"; ok=0; }
  kill -TERM -- -"$pid" 2>/dev/null
  wait "$pid" 2>/dev/null
  [ $ok = 1 ] && echo "status: the 16-rank job's table, --json, and missing/malformed/wrong credentials refused by name"
  [ $ok = 1 ]
}

fail=0
status_case || fail=1
abort_case || fail=1
check stall "rank 13 stalls before collective #7" \
  "ERROR [a-z]+: hang on comm [0-9a-f]+: rank 13 \([^)]* gpu 5\) never entered reducescatter [^ ]+ #3, which rank 0 " \
  "AUTOHA_HEALTH_CMD=cat >> $work/events" -- --stall 13:7 || fail=1
# every process ran AUTOHA_HEALTH_CMD with the finding as one JSON line (the commands run in the
# background: on a loaded machine the last may take a moment)
event_re='^\{"event": "autoha.health", "kind": "missing", "comm": "0x[0-9a-f]{16}", "text": "hang on comm [0-9a-f]+: rank 13 [^"]*", "ranks": \[\{"rank": 13, "host": "[^"]+", "pid": [0-9]+, "gpu": 5\}\], "ranks_total": 1, "call": \{"collective": "reducescatter", "size_bin": "[^"]+", "index": 3\}, "time": [0-9.]+, "host": "[^"]+", "pid": [0-9]+\}$'
for _ in $(seq 50); do
  n=$(grep -cE "$event_re" "$work/events" 2>/dev/null)
  [ "$n" = 32 ] && break
  sleep 0.1
done
if [ "$n" != 32 ]; then
  echo "FAIL stall: $n of 32 processes ran AUTOHA_HEALTH_CMD with the event"
  grep -vE "$event_re" "$work/events" | head -2
  fail=1
else echo "stall: 32 events reached AUTOHA_HEALTH_CMD"; fi
check hang "rank 22 of communicator [0-9a-f]+ never completes collective #5" \
  "ERROR [a-z]+: hang on comm [0-9a-f]+: the GPU of rank 22 \([^)]* gpu 6\) stopped .*rank 0 .* \+29 more wait for it" \
  NCCLSIM_FAULT=hang:rank=22:call=5 -- || fail=1
check mismatch "rank 30 issues collective #6 with" \
  "ERROR [a-z]+: hang on comm [0-9a-f]+: ranks entered different calls \(program bug\): rank 30 \([^)]* gpu 6\) entered reducescatter [^ ]+ #0 where 31 others entered reducescatter [^ ]+ #2" \
  NCCLSIM_MISMATCH=hang -- --mismatch 30:6 || fail=1
exit $fail
