#!/usr/bin/env bash
# Hang localisation on 32 ranks over 4 simulated nodes, with libautoha.so preloaded in its default
# (observe) mode: for each case the issue names — (a) a rank whose host stops before a call
# (train_job --stall), (b) a rank whose collective never completes on its GPU (NCCLSIM_FAULT=hang),
# (c) a rank that issues a different collective (train_job --mismatch, hanging as real NCCL
# would) — every rank's process must log the one finding line naming the culprit within
# AUTOHA_HANG_S + 2 s of the fault.
#   run_hang_diag.sh NCCLSIM_RUN TRAIN_JOB LIBAUTOHA SIMLIB_DIR
set -u
run=$1 job=$2 lib=$3 simlib=$4
hang_s=3
work=$(mktemp -d)
export AUTOHA_REPORT="$work/reports/%h-%p.json" # not into the working folder
trap 'rm -rf "$work"' EXIT
now() { date +%s.%N; }

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
  kill -TERM -- -"$pid" 2>/dev/null
  wait "$pid" 2>/dev/null
  if [ -z "$t0" ]; then echo "FAIL $name: the fault never struck"; tail -20 "$log"; return 1; fi
  if [ -z "$t1" ]; then
    echo "FAIL $name: $n of 32 processes logged the finding"; grep -E "hang on|fault|stalls|issues" "$log" | head -5
    return 1
  fi
  local took
  took=$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.1f", b - a }')
  if ! awk -v t="$took" -v h="$hang_s" 'BEGIN { exit !(t <= h + 2) }'; then
    echo "FAIL $name: the finding took $took s (bound $hang_s + 2 s)"; return 1
  fi
  if grep -E "hang on" "$log" | grep -vqE "$finding_re"; then
    echo "FAIL $name: another finding was logged:"; grep -E "hang on" "$log" | grep -vE "$finding_re" | head -3
    return 1
  fi
  echo "$name: 32 of 32 processes named the culprit $took s after the fault (AUTOHA_HANG_S=$hang_s)"
}

# AUTOHA_HEALTH_ACTION=abort: every process revokes its ranks of the communicator, the ranks
# waiting in it fail by themselves and the launcher ends the stalled one: the job is over, non-zero,
# within AUTOHA_HANG_S + 5 s of the fault.
abort_case() {
  local log=$work/abort.log t0= t1= rc
  AUTOHA_HEALTH_ACTION=abort AUTOHA_HANG_S=$hang_s NCCLSIM_TIMEOUT_S=120 NCCLSIM_RUN_GRACE_S=2 \
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
  local took n_rev n_fail
  took=$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.1f", b - a }')
  n_rev=$(grep -c "revoked 1 local rank (AUTOHA_HEALTH_ACTION=abort)" "$log")
  n_fail=$(grep -cE "^train_job: rank [0-9]+: .* failed" "$log")
  [ "$rc" -ne 0 ] || { echo "FAIL abort: the job exited 0"; return 1; }
  [ "$n_rev" = 32 ] || { echo "FAIL abort: $n_rev of 32 processes revoked"; return 1; }
  [ "$n_fail" = 31 ] || { echo "FAIL abort: $n_fail of the 31 waiting ranks failed their call"; return 1; }
  awk -v t="$took" -v h="$hang_s" 'BEGIN { exit !(t <= h + 5) }' ||
    { echo "FAIL abort: the job ended $took s after the fault (bound $hang_s + 5 s)"; return 1; }
  # the ranks that exited wrote their report at exit, with the finding in its health section
  local n_rep
  n_rep=$(grep -l '"kind": "missing"' "$work"/reports/*.json 2>/dev/null | wc -l)
  [ "$n_rep" -ge 31 ] || { echo "FAIL abort: $n_rep reports hold the finding (31 expected)"; return 1; }
  echo "abort: 32 processes revoked, 31 ranks failed by themselves (their reports hold the finding)," \
    "job over (status $rc) $took s after the fault"
}

fail=0
abort_case || fail=1
check stall "rank 13 stalls before collective #7" \
  "error: hang on comm [0-9a-f]+: rank 13 \([^)]* gpu 5\) never entered reducescatter [^ ]+ #3, which rank 0 " \
  "AUTOHA_HEALTH_CMD=cat >> $work/events" -- --stall 13:7 || fail=1
# every process ran AUTOHA_HEALTH_CMD with the finding as one JSON line
sleep 0.5
n=$(grep -c '^{"event": "autoha.health", "kind": "missing", "comm": "0x[0-9a-f]*", "text": "hang on comm [0-9a-f]*: rank 13 .*"pid": [0-9]*}$' "$work/events" 2>/dev/null)
if [ "$n" != 32 ]; then echo "FAIL stall: $n of 32 processes ran AUTOHA_HEALTH_CMD with the event"; head -2 "$work/events"; fail=1
else echo "stall: 32 events reached AUTOHA_HEALTH_CMD"; fi
check hang "rank 22 of communicator [0-9a-f]+ never completes collective #5" \
  "error: hang on comm [0-9a-f]+: the GPU of rank 22 \([^)]* gpu 6\) stopped .*rank 0 .* \+29 more wait for it" \
  NCCLSIM_FAULT=hang:rank=22:call=5 -- || fail=1
check mismatch "rank 30 issues collective #6 with" \
  "error: hang on comm [0-9a-f]+: ranks entered different calls \(program bug\): rank 30 \([^)]* gpu 6\) entered reducescatter [^ ]+ #0 where 31 others entered reducescatter [^ ]+ #2" \
  NCCLSIM_MISMATCH=hang -- --mismatch 30:6 || fail=1
exit $fail
