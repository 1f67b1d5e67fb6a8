#!/usr/bin/env bash
# A late straggler (docs/diagnosis.md "Stragglers", audits): 8 ranks on 2 simulated nodes at a real
# job's pace (every host sleeps 150 ms per step, ~6 steps a second) and synchronising after every
# step, libautoha.so preloaded in MODE (AUTOHA_MODE: tune, observe) with NCCLSIM_NOISE=0.02; rank 5
# turns 20% slower at its collective #400, 50 steps in, after every key has settled into its one-in-64
# sampling (12 late samples of a key would take ~190 steps, 30 s). Every process names rank 5
# within the hub's audit period (AUTOHA_STRAGGLER_AUDIT_S, 10 s) + 5 s of the change, and no other.
#   run_straggler_late.sh NCCLSIM_RUN TRAIN_JOB LIBAUTOHA SIMLIB_DIR MODE
# CULPRIT_RANK (default 5; any rank, rank 0's process also runs the hub) and CULPRIT_AFTER (default
# 400, the collective it turns slow at; the job runs 350 steps after it) move the fault, LATE_WAIT_S
# (default the period + 30 s) is how long after the change to wait for the 8 findings
# (bench/diagnosis runs seeds of them); the last line says RESULT with the figures: named = the
# processes naming the rank, wrong = findings naming another, latency = the change to the first.
set -u
run=$1 job=$2 lib=$3 simlib=$4
export AUTOHA_MODE=$5
work=$(mktemp -d)
trap 'kill -- -$pid 2>/dev/null; rm -rf "$work"' EXIT
export AUTOHA_REPORT="$work/reports/%h-%p.json" NCCLSIM_NOISE=0.02 NCCLSIM_TIMEOUT_S=300 AUTOHA_COORD_IFNAME=lo
period=${AUTOHA_STRAGGLER_AUDIT_S:-10}
victim=${CULPRIT_RANK:-5} after=${CULPRIT_AFTER:-400}
wait_s=${LATE_WAIT_S:-$((period + 30))}
gpu=$((victim % 4)) # 4 ranks per node, one GPU each
iters=$((after / 8 + 350)) # 8 collectives a step
log=$work/late.log
NCCLSIM_FAULT="slow:rank=$victim:pct=20:after=$after" LD_LIBRARY_PATH="$simlib" LD_PRELOAD="$lib" \
  setsid "$run" -n 8 --nodes 2 -- "$job" --iters "$iters" --layer-kib 256 --bucket-kib 1024 --sync step \
  --pace-us 150000 >"$log" 2>&1 &
pid=$!
re="WARN [a-z]+: straggler on comm [0-9a-f]+: rank $victim \\([^)]* gpu $gpu\\) late in"
any='WARN [a-z]+: straggler on comm [0-9a-f]+: rank [0-9]+ \([^)]*\) late in'
struck='' named='' n=0
while kill -0 "$pid" 2>/dev/null; do
  now=$(date +%s.%N)
  [ -z "$struck" ] && grep -q "rank $victim computes 20% slower" "$log" && struck=$now
  if [ -n "$struck" ]; then
    n=$(grep -cE "$re" "$log")
    [ -z "$named" ] && [ "$n" -ge 1 ] && named=$now
    [ "$n" -ge 8 ] && break
    # the bound passed with room: stop waiting
    awk -v a="$struck" -v b="$now" -v w="$wait_s" 'BEGIN { exit !(b - a > w) }' && break
  fi
  sleep 0.1
done
kill -- -"$pid" 2>/dev/null
wait "$pid" 2>/dev/null
fail=0
if [ -z "$struck" ]; then
  echo "FAIL: the fault never struck"; tail -5 "$log"
  echo "RESULT shape=straggler-late named=0 wrong=0 latency=none"
  exit 1
fi
others=$(grep -E "$any" "$log" | grep -vcE "$re")
if [ "$others" != 0 ]; then
  echo "FAIL: other ranks named:"; grep -E "$any" "$log" | grep -vE "$re" | head -3; fail=1
fi
if [ "$n" -lt 8 ]; then
  echo "FAIL: $n of 8 processes named rank $victim"; grep -m3 "straggler" "$log"
  echo "RESULT shape=straggler-late named=$n wrong=$others latency=none"
  exit 1
fi
took=$(awk -v a="$struck" -v b="$named" 'BEGIN { printf "%.1f", b - a }')
echo "RESULT shape=straggler-late named=$n wrong=$others latency=$took"
awk -v t="$took" -v p="$period" 'BEGIN { exit !(t <= p + 5) }' ||
  { echo "FAIL: rank $victim named $took s after it turned slow (bound $period + 5 s)"; fail=1; }
[ $fail = 0 ] && echo "late straggler ($AUTOHA_MODE): 8 of 8 processes named rank $victim (gpu $gpu), the first $took s after it turned slow (bound $period + 5 s): ok"
exit $fail
