#!/usr/bin/env bash
# Diagnosis of a job whose processes each drive 4 GPUs from one thread (tests/shim/multi_gpu_job,
# as nccl-tests and JAX do), 2 processes on 2 simulated nodes, libautoha.so preloaded in its
# default (observe) mode. Each rank's GPU is its communicator's device, not whichever device the
# thread set last: `autoha status --json` shows ranks 0..7 on GPUs 0,1,2,3,0,1,2,3; and when rank
# 6's collective never completes on its GPU (NCCLSIM_FAULT=hang), both processes name rank 6 on GPU
# 2, alone, in the line they log and in the AUTOHA_HEALTH_CMD event (its probe is on its own
# stream: the group's calls are timed on the first rank's).
#   run_multi_gpu_diag.sh NCCLSIM_RUN MULTI_GPU_JOB LIBAUTOHA SIMLIB_DIR AUTOHA_CLI
set -u
run=$1 job=$2 lib=$3 simlib=$4 cli=$5
work=$(mktemp -d)
export AUTOHA_COORD_IFNAME=lo AUTOHA_REPORT="$work/reports/%h-%p.json" NCCLSIM_TIMEOUT_S=60
trap 'rm -rf "$work"' EXIT
fail=0

# status: every rank's GPU, once every rank has reported
cred=$work/hub.cred
AUTOHA_STATUS_FILE="$cred" LD_LIBRARY_PATH="$simlib" LD_PRELOAD="$lib" \
  setsid "$run" -n 2 --nodes 2 -- "$job" --gpus 4 --iters 100000 >"$work/status.log" 2>&1 &
pid=$!
got=
for _ in $(seq 150); do
  if [ -f "$cred" ]; then
    got=$("$cli" status "$cred" --json 2>/dev/null |
      sed -nE 's/.*"rank": ([0-9]+), "host": "[^"]*", "pid": [0-9]+, "gpu": ([0-9]+).*/\1:\2/p' |
      paste -sd, -)
    [ "$(tr , '\n' <<<"$got" | grep -c :)" = 8 ] && break
  fi
  kill -0 "$pid" 2>/dev/null || break
  sleep 0.1
done
kill -TERM -- -"$pid" 2>/dev/null
wait "$pid" 2>/dev/null
if [ "$got" = "0:0,1:1,2:2,3:3,4:0,5:1,6:2,7:3" ]; then
  echo "status: ranks 0..7 on GPUs 0,1,2,3,0,1,2,3: ok"
else
  echo "FAIL status: rank:gpu is '$got', not 0:0,1:1,2:2,3:3,4:0,5:1,6:2,7:3"; tail -3 "$work/status.log"; fail=1
fi

# hang: rank 6's collective #1400 (iteration 200) never completes on its GPU 2; its process's
# thread then waits for that GPU, so ranks 4, 5 and 7 stop behind it, idle
log=$work/hang.log events=$work/events
NCCLSIM_FAULT=hang:rank=6:call=1400 AUTOHA_HANG_S=3 AUTOHA_HEALTH_CMD="cat >>$events" \
  LD_LIBRARY_PATH="$simlib" LD_PRELOAD="$lib" \
  setsid "$run" -n 2 --nodes 2 -- "$job" --gpus 4 --iters 100000 >"$log" 2>&1 &
pid=$!
re='ERROR [a-z]+: hang on comm [0-9a-f]+: rank 6 \(127\.0\.0\.1 pid [0-9]+ gpu 2\) '
n=0
for _ in $(seq 300); do
  n=$(grep -cE "$re" "$log")
  [ "$n" -ge 2 ] && [ "$(grep -c '"kind"' "$events" 2>/dev/null)" -ge 2 ] && break
  kill -0 "$pid" 2>/dev/null || break
  sleep 0.1
done
kill -TERM -- -"$pid" 2>/dev/null
wait "$pid" 2>/dev/null
if [ "$n" -lt 2 ]; then
  echo "FAIL hang: $n of 2 processes named rank 6 on GPU 2:"; grep -E "hang on|fault" "$log" | head -3; fail=1
elif grep -E "hang on" "$log" | grep -vqE "$re"; then
  echo "FAIL hang: another finding:"; grep -E "hang on" "$log" | grep -vE "$re" | head -2; fail=1
else
  ev='"ranks": \[\{"rank": 6, "host": "127\.0\.0\.1", "pid": [0-9]+, "gpu": 2\}\], "ranks_total": 1,'
  m=$(grep -cE "$ev" "$events" 2>/dev/null)
  if [ "$m" = 2 ] && [ "$(grep -c . "$events")" = 2 ]; then
    echo "hang: both processes named rank 6 on GPU 2, alone, in the line and the event: ok"
  else
    echo "FAIL hang: $m of the events name rank 6 on GPU 2 alone:"; head -c 600 "$events"; fail=1
  fi
fi
exit $fail
