#!/usr/bin/env bash
# Straggler detection on 64 ranks over 8 simulated nodes, libautoha.so preloaded in its default
# (observe) mode, with NCCLSIM_NOISE=0.02 jittering every rank's compute: one rank whose GPU
# computes 10% slower (NCCLSIM_FAULT=slow) is named by every process within 50 iterations, and
# `autoha status` marks it; the same job without the fault names no one.
#   run_straggler_diag.sh NCCLSIM_RUN TRAIN_JOB LIBAUTOHA SIMLIB_DIR AUTOHA_CLI
set -u
run=$1 job=$2 lib=$3 simlib=$4 cli=$5
work=$(mktemp -d)
export AUTOHA_REPORT="$work/reports/%h-%p.json" NCCLSIM_NOISE=0.02 NCCLSIM_TIMEOUT_S=300
trap 'rm -rf "$work"' EXIT
# small layers keep 64 processes' copies quick; the reduce-scatters follow each layer's compute
shape=(--iters 60 --layer-kib 256 --bucket-kib 1024)
fail=0

# slow: rank 13 (node 1, GPU 5)
log=$work/slow.log cred=$work/hub.cred
AUTOHA_STATUS_FILE="$cred" NCCLSIM_FAULT=slow:rank=13:pct=10 LD_LIBRARY_PATH="$simlib" LD_PRELOAD="$lib" \
  setsid "$run" -n 64 --nodes 8 -- "$job" "${shape[@]}" >"$log" 2>&1 &
pid=$!
re='WARN [a-z]+: straggler on comm [0-9a-f]+: rank 13 \([^)]* gpu 5\) late in ([0-9]+) of its last ([0-9]+) sampled calls'
n=0
for _ in $(seq 1800); do
  n=$(grep -cE "$re" "$log")
  [ "$n" -ge 64 ] && break
  kill -0 "$pid" 2>/dev/null || break
  sleep 0.1
done
status=$("$cli" status "$cred" 2>&1)
wait "$pid" || { echo "FAIL slow: the job failed"; tail -5 "$log"; fail=1; }
if [ "$n" -lt 64 ]; then
  echo "FAIL slow: $n of 64 processes named rank 13 a straggler"; grep straggler "$log" | head -3; fail=1
else
  # the call that decided, in iterations: 4 all-gathers and 4 reduce-scatters per iteration
  line=$(grep -m1 -E "$re" "$log")
  call=$(sed -E 's/.*up to ([a-z]+) [^ ]+ #([0-9]+).*/\1 \2/' <<<"$line")
  set -- $call
  per=1
  case $1 in allgather | reducescatter) per=4 ;; esac
  iter=$(($2 / per))
  [ "$iter" -lt 50 ] || { echo "FAIL slow: named at iteration $iter (bound 50): $line"; fail=1; }
  others=$(grep -E "WARN [a-z]+: straggler on" "$log" | grep -vcE "$re")
  [ "$others" = 0 ] || { echo "FAIL slow: other ranks named:"; grep -E "WARN [a-z]+: straggler on" "$log" | grep -vE "$re" | head -3; fail=1; }
  grep -qE '^ +13  .*%  straggler$' <<<"$status" ||
    { echo "FAIL slow: autoha status does not mark rank 13:"; grep -E '^ +1[0-9]  ' <<<"$status" | head -5; fail=1; }
  [ "$(grep -c '  straggler$' <<<"$status")" = 1 ] || { echo "FAIL slow: autoha status marks more than rank 13"; fail=1; }
  [ $fail = 0 ] && echo "slow: 64 of 64 processes named rank 13 at $1 #$2 (iteration $iter); autoha status marks it: ok"
fi

# clean: the same job and noise, no fault, no finding
log=$work/clean.log
LD_LIBRARY_PATH="$simlib" LD_PRELOAD="$lib" "$run" -n 64 --nodes 8 -- "$job" "${shape[@]}" >"$log" 2>&1 ||
  { echo "FAIL clean: the job failed"; tail -5 "$log"; fail=1; }
if grep -q "straggler on" "$log"; then
  echo "FAIL clean: a straggler was named:"; grep "straggler on" "$log" | head -3; fail=1
else
  echo "clean: 64 ranks, $(grep -c . "$log") lines of output, no straggler named: ok"
fi
exit $fail
