#!/usr/bin/env bash
# The culprit of a stopped job, in the shapes real programs have (docs/diagnosis.md "Why each
# finding is right"): 8 ranks on 2 simulated nodes run train_job with libautoha.so preloaded, a
# fault strikes rank 5 (its GPU 1 on node 1), and every process that is still alive must name rank
# 5 — with its host, pid and its own GPU — and no other rank, within AUTOHA_HANG_S + 2 s (the 2 s
# stretched by the machine's measured pace, tests/common/pace.sh). The
# findings are read from AUTOHA_HEALTH_CMD's JSON events (the ranks at fault, not the ranks a line
# cites as witnesses).
#   run_culprit_shapes.sh NCCLSIM_RUN TRAIN_JOB LIBAUTOHA SIMLIB_DIR AUTOHA_CLI MODE SHAPE
# MODE: observe or tune. CULPRIT_RANK (default 5, not 0: rank 0 runs the hub) and CULPRIT_CALL
# (default 29, the last collective of a step) move the fault (bench/diagnosis runs seeds of them);
# the last line says RESULT with the figures. SHAPE:
#   stall      the host stops before a call, in a loop that synchronises after each step
#   hang-sync  the GPU stops inside the last call of a step; the host then waits in
#              cudaStreamSynchronize (every loop that logs its loss)
#   hang-item  the same, the host waiting in a synchronous cudaMemcpy (PyTorch's .item())
#   hang-ahead the GPU stops; the host goes on queueing (it synchronises only at the end)
#   sigstop    the process is frozen (SIGSTOP) mid-job; `autoha status` shows it silent
#   sigkill    the process is killed (SIGKILL) mid-job
#   hubkill    the process of rank 0, which runs the hub, is killed: every other process says the
#              hub is gone, and none is held up by autoha (the job ends by NCCL's error); its
#              RESULT counts those processes, other autoha warnings as wrong, and the time until
#              the 7th said it
#   relaykill  the process that carries its host's other processes to the hub (the host relay) is
#              killed: rank 0, the hub's process, runs with AUTOHA_COORD_RELAY=0 (ranks with
#              different settings), so the relay is another rank's, picked as the victim once the
#              job runs; its relayed survivors reconnect and are told who died
#   torch-sleep, torch-kill  a PyTorch loop (tests/torch/torch_diag.py: all_reduce, then .item())
#              whose rank 5 sleeps for good in a step, or is killed; TRAIN_JOB is then the python of
#              a venv with torch (scripts/torch-venv), run with ncclsim-run --preload
set -u
run=$1 job=$2 lib=$3 simlib=$4 cli=$5 mode=$6 shape=$7
hang_s=3
work=$(mktemp -d)
trap 'kill -KILL -- -"${pid:-0}" 2>/dev/null; [ -n "${CULPRIT_KEEP:-}" ] && cp -r "$work" "$CULPRIT_KEEP"; rm -rf "$work"' EXIT
now() { date +%s.%N; }
. "$(dirname "$0")/../common/pace.sh"
fail() {
  echo "FAIL $shape ($mode): $*"
  echo "RESULT shape=$shape named=${n:-0} wrong=0 latency=none"
  exit 1
}

victim=${CULPRIT_RANK:-5} call=${CULPRIT_CALL:-29}
gpu=$((victim % 4)) # 4 ranks per node, one GPU each
job_args=(--iters 400 --sync step) envs=() signal= launch=(-n 8 --nodes 2 --)
procpat=$(basename "$job")
case $shape in
  stall) job_args+=(--stall $victim:$call) ;;
  hang-sync) envs+=(NCCLSIM_FAULT=hang:rank=$victim:call=$call) ;;
  hang-item) envs+=(NCCLSIM_FAULT=hang:rank=$victim:call=$call); job_args=(--iters 400 --sync item) ;;
  hang-ahead) envs+=(NCCLSIM_FAULT=hang:rank=$victim:call=$call); job_args=(--iters 400) ;;
  sigstop) signal=STOP ;;
  sigkill) signal=KILL ;;
  hubkill) signal=KILL victim=0 ;;
  relaykill)
    signal=KILL victim=relay
    job_args=(-c 'if [ "$RANK" = 0 ]; then export AUTOHA_COORD_RELAY=0; fi; exec "$0" "$@"' "$job"
              "${job_args[@]}")
    job=/bin/bash
    ;;
  torch-sleep | torch-kill)
    # the NCCL the wheel ships (sim/ emulates it), 4 GPUs per node
    envs+=(NCCLSIM_VERSION=2.30.7 NCCLSIM_DEVICES=4 TORCH_DIAG_SLEEP=$victim:20)
    [ "$shape" = torch-kill ] && envs=(NCCLSIM_VERSION=2.30.7 NCCLSIM_DEVICES=4) signal=KILL
    launch=(--preload -n 8 --nodes 2 --) job_args=("$(dirname "$0")/../torch/torch_diag.py")
    procpat=torch_diag.py
    ;;
  *) echo "unknown shape $shape"; exit 2 ;;
esac
log=$work/job.log
env "${envs[@]}" AUTOHA_MODE="$mode" AUTOHA_COORD_IFNAME=lo AUTOHA_REPORT="$work/reports/%h-%p.json" \
  AUTOHA_HANG_S=$hang_s "AUTOHA_HEALTH_CMD=cat >> $work/events" NCCLSIM_TIMEOUT_S=60 \
  NCCLSIM_RUN_GRACE_S=5 LD_LIBRARY_PATH="$simlib" LD_PRELOAD="$lib" \
  setsid "$run" "${launch[@]}" "$job" "${job_args[@]}" >"$log" 2>&1 &
pid=$!

# the pid of the process holding this job's host relay (the abstract socket autoha-relay-*)
relay_pid() {
  local ino p
  for ino in $(awk '$8 ~ /^@autoha-relay-/ { print $7 }' /proc/net/unix); do
    for p in $(pgrep -s "$pid" -f "$procpat"); do
      if ls -l "/proc/$p/fd" 2>/dev/null | grep -q "socket:\[$ino\]"; then echo "$p"; return; fi
    done
  done
}
rank_of() { tr '\0' '\n' <"/proc/$1/environ" 2>/dev/null | sed -n 's/^RANK=//p'; }

# the victim's pid (the process whose RANK is the victim, in this job's session)
vpid=
[ "$victim" = relay ] && vpid=later
for _ in $(seq 300); do
  [ -n "$vpid" ] && break
  for p in $(pgrep -s "$pid" -f "$procpat"); do
    if tr '\0' '\n' <"/proc/$p/environ" 2>/dev/null | grep -qx "RANK=$victim"; then vpid=$p; fi
  done
  [ -n "$vpid" ] && break
  sleep 0.1
done
[ -n "$vpid" ] || fail "rank $victim's process never started"

t0=
if [ -n "$signal" ]; then
  # strike once every rank has joined and runs its steps: records reach the hub once a second
  if [[ $shape == torch-* ]]; then
    # torch imports for a few seconds first, a minute or more on a loaded machine: strike once
    # every rank says it runs its steps (torch_diag.py), then give the records 2 s to reach the hub
    for _ in $(seq 2000); do
      [ "$(grep -c "runs its steps" "$log")" -ge 8 ] && break
      kill -0 "$pid" 2>/dev/null || fail "the job ended before its ranks ran their steps"
      sleep 0.1
    done
    [ "$(grep -c "runs its steps" "$log")" -ge 8 ] || fail "the ranks did not all run their steps in 200 s"
    sleep 2
  else
    # strike once `autoha status` shows all 8 ranks of a communicator past their first step with
    # a fresh record (a fixed 3 s came before some rank's first record on a loaded machine: the
    # finding was then rightly "never reported", not the shape's)
    why=$("$(dirname "$0")/wait_running.sh" "$cli" "$work/reports" "$pid" 8 30) || fail "$why"
  fi
  if [ "$victim" = relay ]; then
    vpid=$(relay_pid)
    [ -n "$vpid" ] || fail "no process of the job holds the host relay"
    victim=$(rank_of "$vpid")
    gpu=$((victim % 4))
    [ "$victim" != 0 ] || fail "rank 0 holds the host relay despite AUTOHA_COORD_RELAY=0"
    echo "the host relay is rank $victim's process (pid $vpid)"
  fi
  kill -"$signal" "$vpid" || fail "cannot signal pid $vpid"
  t0=$(now)
else
  waits=300
  [[ $shape == torch-* ]] && waits=2000 # torch's imports, up to minutes on a loaded machine
  for _ in $(seq $waits); do
    if grep -qE "stalls before collective|never completes collective|sleeps at step" "$log"; then
      t0=$(now)
      break
    fi
    sleep 0.1
  done
  [ -n "$t0" ] || fail "the fault never struck"
fi

alive=8
[ -n "$signal" ] && alive=7 # the frozen or killed process says nothing
if [ "$shape" = hubkill ]; then
  # RESULT: named = the processes that said the hub is gone, wrong = other autoha warnings (a rank
  # named, a process held up), latency = until the 7th said it; a job autoha keeps from ending
  # reports no latency (a miss)
  t1=
  for _ in $(seq $(((hang_s + 2) * 10))); do
    if [ "$(grep -c "hub .* is gone" "$log")" -ge 7 ]; then t1=$(now); break; fi
    sleep 0.1
  done
  n=$(grep -c "hub .* is gone" "$log")
  [ -n "$t1" ] || fail "$n of 7 processes said the hub is gone"
  for _ in $(seq 200); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  kill -0 "$pid" 2>/dev/null && fail "the job did not end 20 s after its hub's process was killed"
  other=$(grep -E "autoha (ERROR|WARN)" "$log" | grep -v "is gone")
  if [ -n "$other" ]; then
    echo "FAIL $shape ($mode): another autoha warning: $(head -2 <<<"$other")"
    echo "RESULT shape=$shape named=$n wrong=$(wc -l <<<"$other") latency=none"
    exit 1
  fi
  took=$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.1f", b - a }')
  echo "RESULT shape=$shape named=$n wrong=0 latency=$took"
  echo "$shape ($mode): 7 of 7 processes said the hub is gone $took s after the kill; the job ended by NCCL's error"
  exit 0
fi

# every living process ran AUTOHA_HEALTH_CMD with a finding naming the victim; a link's finding is
# about a link, not a rank (sim/'s wires run on the CPU: on a machine at load 40 one QP can read
# at a sixth of the median and be named a slow link), so those are left out
linkev='"kind": "(slow_link|link_ok)"'
t1=
for _ in $(seq $(((hang_s + 8) * 10))); do
  if [ -f "$work/events" ] && [ "$(grep -vE "$linkev" "$work/events" | grep -c '"kind"')" -ge $alive ]; then
    t1=$(now)
    break
  fi
  sleep 0.1
done
# the machine's pace while the job still runs: the bound's 2 s of slack stretch by it
pace=$(pace_factor)
if [ "$shape" = sigstop ] && [ -n "$t1" ]; then # while it is frozen: the table says so
  cred=$(ls "$work"/reports/hub-*.cred 2>/dev/null | head -1)
  st=$("$cli" status "$cred" --json 2>&1)
  echo "$st" | python3 -c '
import json, sys
d, victim = json.load(sys.stdin), int(sys.argv[1])
states = {r["rank"]: r["state"] for c in d["comms"] for r in c["ranks"]}
bad = {r: s for r, s in states.items() if (s == "silent") != (r == victim)}
if bad or len(states) != 8:
    sys.exit("autoha status: ranks %s (want 8 ranks, rank %d alone silent)" % (bad or states, victim))' "$victim" ||
    fail "autoha status --json: $(echo "$st" | head -c 300)"
fi
[ "$signal" = STOP ] && kill -CONT "$vpid" 2>/dev/null
kill -TERM -- -"$pid" 2>/dev/null
wait "$pid" 2>/dev/null
n=$(grep -vE "$linkev|\"resumed\"" "$work/events" 2>/dev/null | grep -c '"kind"')
[ -n "$t1" ] || fail "${n:-0} of $alive processes reported a finding; log: $(grep -E "autoha (ERROR|WARN)" "$log" | head -3)"
python3 - "$work/events" "$victim" "$vpid" "$shape" "$gpu" <<'EOF' || { echo "RESULT shape=$shape named=$n wrong=1"; exit 1; }
import json, sys
path, victim, vpid, shape, gpu = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4], int(sys.argv[5])
want = {"stall": "missing", "sigstop": "stopped", "sigkill": "died", "relaykill": "died", "torch-sleep": "missing",
        "torch-kill": "died"}.get(shape, "incomplete")
bad = []
for line in open(path):
    e = json.loads(line)
    if e["kind"] in ("resumed", "slow_link", "link_ok"):
        continue
    ranks = e["ranks"]
    if e["kind"] != want or e["ranks_total"] != 1 or len(ranks) != 1:
        bad.append(e["text"])
        continue
    r = ranks[0]
    # each rank has its own GPU, its local rank
    if (r["rank"], r["pid"], r["gpu"], r["host"]) != (victim, vpid, gpu, "127.0.0.1"):
        bad.append("%s (named %s)" % (e["text"], r))
if bad:
    print("FAIL %s: a finding not naming rank %d (pid %d, gpu %d) alone as %s: %s" % (shape, victim, vpid, gpu, want, bad[0]))
    sys.exit(1)
EOF
took=$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.1f", b - a }')
echo "RESULT shape=$shape named=$n wrong=0 latency=$took"
bound=$(awk -v h="$hang_s" -v p="$pace" 'BEGIN { printf "%.1f", h + 2 * p }')
awk -v t="$took" -v b="$bound" 'BEGIN { exit !(t <= b) }' ||
  fail "the findings took $took s (bound AUTOHA_HANG_S + 2 s x the machine's pace $pace = $bound s)"
echo "$shape ($mode): $n of $alive processes named rank $victim (pid $vpid, gpu $gpu) alone, $took s after the fault"
