#!/usr/bin/env bash
# The hub's process frozen (SIGSTOP of rank 0, which runs the hub, for STOP_S seconds: a debugger,
# a stopped container, a host swapping), in tune mode: 8 ranks on 2 simulated nodes run train_job
# with a step that synchronises and a wall-clock pace; the job must complete with every rank
# agreeing on every call (sim/ fails a call the ranks configure differently, where real NCCL
# hangs), no finding may name a rank while the hub is frozen or after it thaws, and then:
#   tuning resumes: a key the job first meets after the thaw (train_job --late-key) is searched by
#   the leader and run with its decisions on every rank (every report: source tuned, one config);
#   diagnosis resumes: rank 5's process frozen after the thaw is named, alone, as stopped by every
#   other process within AUTOHA_HANG_S + 8 s.
#   run_hub_freeze.sh NCCLSIM_RUN TRAIN_JOB LIBAUTOHA SIMLIB_DIR AUTOHA_CLI STOP_S
set -u
run=$1 job=$2 lib=$3 simlib=$4 cli=$5 stop_s=$6
hang_s=3
work=$(mktemp -d)
trap 'kill -CONT "${hub:-0}" "${v5:-0}" 2>/dev/null; kill -KILL -- -"${pid:-0}" 2>/dev/null; rm -rf "$work"' EXIT
fail() {
  echo "FAIL (freeze $stop_s s): $*"
  grep -E "autoha (ERROR|WARN)|disagree" "$log" 2>/dev/null | cut -c1-300 | head -5
  exit 1
}
now() { date +%s.%N; }
pid_of_rank() {
  local p
  for p in $(pgrep -s "$pid" -f "$(basename "$job")"); do
    tr '\0' '\n' <"/proc/$p/environ" 2>/dev/null | grep -qx "RANK=$1" && { echo "$p"; return; }
  done
}

# At most 10 iterations a second (--pace-us 100000): by the freeze, 2 s after every rank is past
# its first steps, far fewer than the 120 before the late key starts, which is after the thaw.
log=$work/job.log
env AUTOHA_MODE=tune AUTOHA_COORD_IFNAME=lo AUTOHA_REPORT="$work/reports/%h-%p.json" \
  AUTOHA_HANG_S=$hang_s "AUTOHA_HEALTH_CMD=cat >> $work/events" NCCLSIM_TIMEOUT_S=$((stop_s + 120)) \
  NCCLSIM_RUN_GRACE_S=5 LD_LIBRARY_PATH="$simlib" LD_PRELOAD="$lib" \
  setsid "$run" -n 8 --nodes 2 -- "$job" --iters 260 --sync step --pace-us 100000 --late-key 120 \
  >"$log" 2>&1 &
pid=$!

why=$("$(dirname "$0")/wait_running.sh" "$cli" "$work/reports" "$pid" 8 30) || fail "$why"
sleep 2
hub=$(pid_of_rank 0)
[ -n "$hub" ] || fail "no process of rank 0"
kill -STOP "$hub"
sleep "$stop_s"
kill -CONT "$hub"
echo "rank 0 (the hub's process, pid $hub) was frozen for $stop_s s"
[ -s "$work/events" ] && fail "a finding while the hub was frozen: $(head -c 300 "$work/events")"

# every process said the hub answers again (the frozen one's client never lost it)
for _ in $(seq 300); do
  [ "$(grep -c "answers again\|reconnected to hub" "$log")" -ge 7 ] && break
  sleep 0.1
done
n=$(grep -c "answers again\|reconnected to hub" "$log")
[ "$n" -ge 7 ] || fail "$n of 7 processes reached the hub again within 30 s of the thaw"
sleep 3
[ -s "$work/events" ] && fail "a finding after the thaw, before any fault: $(head -c 300 "$work/events")"

v5=$(pid_of_rank 5)
[ -n "$v5" ] || fail "no process of rank 5"
kill -STOP "$v5"
t0=$(now) t1=
for _ in $(seq $(((hang_s + 8) * 10))); do
  if [ -f "$work/events" ] && [ "$(grep -c '"kind": "stopped"' "$work/events")" -ge 7 ]; then
    t1=$(now)
    break
  fi
  sleep 0.1
done
kill -CONT "$v5"
n=$(grep -c '"kind": "stopped"' "$work/events" 2>/dev/null)
[ -n "$t1" ] || fail "${n:-0} of 7 processes named rank 5 stopped after the thaw"
python3 - "$work/events" "$v5" <<'EOF' || fail "a finding named another rank"
import json, sys
for line in open(sys.argv[1]):
    e = json.loads(line)
    if e["kind"] in ("resumed", "slow_link", "link_ok"):
        continue
    r = e["ranks"]
    if e["kind"] != "stopped" or len(r) != 1 or (r[0]["rank"], r[0]["pid"]) != (5, int(sys.argv[2])):
        sys.exit("not rank 5 alone: " + e["text"])
EOF
took=$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.1f", b - a }')

wait "$pid"
rc=$?
[ "$rc" -eq 0 ] || fail "the job failed (rc $rc)"
grep -q "disagree" "$log" && fail "the ranks disagreed on a call"
python3 - "$work"/reports/*.json <<'EOF' || fail "the late key was not tuned for every rank"
import json, sys
configs, leader = {}, None
for path in sys.argv[1:]:
    d = json.load(open(path))
    for c in d["comms"]:
        for k in c["keys"]:
            if k["coll"] == "allreduce" and k["bytes"]["min"] == 65536:
                if k["source"] != "tuned":
                    sys.exit("rank %d runs the late key as %s" % (d["rank"], k["source"]))
                configs[d["rank"]] = k["applied"]["config"]["text"]
                if "tuning" in k:
                    leader = k["tuning"]["state"]
if sorted(configs) != list(range(8)) or len(set(configs.values())) != 1:
    sys.exit("the late key's configs by rank: %s" % configs)
if leader != "converged":
    sys.exit("the leader's search of the late key: %s" % leader)
print("the late key (allreduce 64 KiB, first met after the thaw): %s on all 8 ranks" % configs[0])
EOF
echo "PASS (freeze $stop_s s): the job completed in agreement, tuned a key met after the thaw, and" \
  "named rank 5 stopped on 7 of 7 processes $took s after it froze"
