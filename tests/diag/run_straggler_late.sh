#!/usr/bin/env bash
# A late straggler (docs/diagnosis.md "Stragglers", audits): 8 ranks on 2 simulated nodes at a real
# job's pace (every host sleeps 150 ms per step, ~6 steps a second) and synchronising after every
# step, libautoha.so preloaded in MODE (AUTOHA_MODE: tune, observe) with NCCLSIM_NOISE=0.02; rank 5
# turns 20% slower at its collective #400, 50 steps in, after every key has settled into its one-in-64
# sampling (12 late samples of a key would take ~190 steps, 30 s). Every process names rank 5
# within the hub's audit period (AUTOHA_STRAGGLER_AUDIT_S, 10 s) + 5 s of the change, and no other.
#   run_straggler_late.sh NCCLSIM_RUN TRAIN_JOB LIBAUTOHA SIMLIB_DIR MODE
set -u
run=$1 job=$2 lib=$3 simlib=$4
export AUTOHA_MODE=$5
work=$(mktemp -d)
trap 'kill -- -$pid 2>/dev/null; rm -rf "$work"' EXIT
export AUTOHA_REPORT="$work/reports/%h-%p.json" NCCLSIM_NOISE=0.02 NCCLSIM_TIMEOUT_S=300
period=${AUTOHA_STRAGGLER_AUDIT_S:-10}
log=$work/late.log
NCCLSIM_FAULT=slow:rank=5:pct=20:after=400 LD_LIBRARY_PATH="$simlib" LD_PRELOAD="$lib" \
  setsid "$run" -n 8 --nodes 2 -- "$job" --iters 400 --layer-kib 256 --bucket-kib 1024 --sync step --pace-us 150000 \
  >"$log" 2>&1 &
pid=$!
re='WARN [a-z]+: straggler on comm [0-9a-f]+: rank 5 \([^)]* gpu 1\) late in'
struck='' named='' n=0
while kill -0 "$pid" 2>/dev/null; do
  now=$(date +%s.%N)
  [ -z "$struck" ] && grep -q "rank 5 computes 20% slower" "$log" && struck=$now
  if [ -n "$struck" ]; then
    n=$(grep -cE "$re" "$log")
    [ -z "$named" ] && [ "$n" -ge 1 ] && named=$now
    [ "$n" -ge 8 ] && break
    # the bound passed with room: stop waiting
    awk -v a="$struck" -v b="$now" -v p="$period" 'BEGIN { exit !(b - a > p + 30) }' && break
  fi
  sleep 0.1
done
fail=0
[ -n "$struck" ] || { echo "FAIL: the fault never struck"; tail -5 "$log"; exit 1; }
if [ "$n" -lt 8 ]; then
  echo "FAIL: $n of 8 processes named rank 5"; grep -m3 "straggler" "$log"; fail=1
else
  took=$(awk -v a="$struck" -v b="$named" 'BEGIN { printf "%.1f", b - a }')
  awk -v t="$took" -v p="$period" 'BEGIN { exit !(t <= p + 5) }' ||
    { echo "FAIL: rank 5 named $took s after it turned slow (bound $period + 5 s)"; fail=1; }
  others=$(grep -E "WARN [a-z]+: straggler on" "$log" | grep -vcE "$re")
  [ "$others" = 0 ] || { echo "FAIL: other ranks named:"; grep -E "WARN [a-z]+: straggler on" "$log" | grep -vE "$re" | head -3; fail=1; }
  [ $fail = 0 ] && echo "late straggler ($AUTOHA_MODE): 8 of 8 processes named rank 5, the first $took s after it turned slow (bound $period + 5 s): ok"
fi
kill -- -"$pid" 2>/dev/null
wait "$pid" 2>/dev/null
exit $fail
