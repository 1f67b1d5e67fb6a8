#!/usr/bin/env bash
# A NIC port down without HA (docs/diagnosis.md "A NIC port down"): 4 ranks of train_job on 2
# simulated nodes (ranks 0-1 on node0, 2-3 on node1), dual-port NICs, libautoha.so preloaded with
# AUTOHA_HA=off, and one NIC port taken down 2 s in. The job then fails with NCCL's IB error, as it
# does without autoha; before that, every process must log the nic_down finding naming the rank
# whose own NIC lost the port, its NIC and port, within BOUND_S of the fault, and no other rank:
# neither its peer across the fabric (whose queue pairs fail too, retry exceeded or flushed) nor
# the rank beside it on the same host, whose process opened the same NIC (and got its PORT_ERR)
# but has no queue pair on the port.
#   run_nic_down.sh NCCLSIM_RUN TRAIN_JOB LIBAUTOHA SIMLIB_DIR SIDE
# SIDE: node1  node1/mlx5_3's port 1 down: rank 3 is named (its peer rank 1, on node0, is not)
#       node0  node0/mlx5_3's port 1 down: rank 1 is named (its peer rank 3 is not)
# The truth is NCCL's own: of the faulted node's ranks, the ones whose IB error names hca mlx5_3.
# AUTOHA_HEALTH_CMD gets the finding as kind nic_down with that rank, in every process. The last
# line says RESULT: named = processes logging the finding, wrong = ranks not at fault that a finding
# (any kind, any of its forms: see below) or AUTOHA_HEALTH_CMD's event names, latency = the fault
# to the 4th process's line (bench/diagnosis/run_faults.sh).
set -u
run=$1 job=$2 lib=$3 simlib=$4 side=${5:-node1}
fault_s=${NIC_FAULT_S:-2} bound_s=${BOUND_S:-5} dev=${NIC_DEV:-mlx5_3} port=${NIC_PORT:-1}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
case $side in
node0) node=0 ;;
node1) node=1 ;;
*) echo "FAIL: unknown side '$side' (expected node0 or node1)"; exit 2 ;;
esac
now() { date +%s.%N; }
export LD_LIBRARY_PATH="$simlib" NCCLSIM_TOPO=nic=8x400x2 NCCLSIM_FABRIC=bond=0 \
  AUTOHA_COORD_IFNAME=lo NCCLSIM_TIMEOUT_S=30 NCCLSIM_RUN_GRACE_S=2 NCCLSIM_VERBS_TIMEOUT_SCALE=0.01
log=$work/job.log events=$work/events
mkdir -p "$events"
t_start=$(now)
AUTOHA_HA=off AUTOHA_LOG_TIME=1 AUTOHA_REPORT="$work/rep/%h-%p.json" \
  AUTOHA_HEALTH_CMD="cat > $events/\$\$.json" \
  NCCLSIM_FABRIC_FAULTS="at=${fault_s}s:portdown:node$node/$dev:$port" LD_PRELOAD="$lib" \
  timeout 100 "$run" -n 4 --nodes 2 -- "$job" --iters 400 >"$log" 2>&1
rc=$?
sleep 0.5 # AUTOHA_HEALTH_CMD's commands run in the background
fail=0
[ $rc -ne 0 ] || { echo "FAIL: the job completed; a port down without HA should fail it"; fail=1; }
grep -q "NET/IB: .*hca $dev" "$log" || { echo "FAIL: NCCL saw no IB error on $dev"; fail=1; }
# the truth: the faulted node's ranks whose own IB error names the NIC
want=$(grep -oE "hca $dev \(rank [0-9]+," "$log" | grep -oE "[0-9]+" | sort -u |
  awk -v n="$node" '$1 >= 2 * n && $1 < 2 * n + 2' | tr '\n' ' ' | sed 's/ $//')
[ -n "$want" ] || { echo "FAIL: no rank of node$node reported an IB error on $dev"; tail -5 "$log"; fail=1; }
re="autoha ERROR [a-z]+: NIC down on comm [0-9a-f]+: rank ([0-9]+) \\([^)]*\\)'s NIC $dev port $port is down"
lines=$(grep -E "$re" "$log")
named=$(sed -nE "s/.*: NIC down on comm [0-9a-f]+: rank ([0-9]+) .*/\1/p" <<<"$lines" | sort -u | tr '\n' ' ' | sed 's/ $//')
# every process logs it: one line per process (NCCL's prefix host:pid:tid)
nproc=$(grep -oE "^\[[^]]*\] [^:]+:[0-9]+:" <<<"$lines" | sed -E 's/.* [^:]+:([0-9]+):$/\1/' | sort -u | wc -l)
# a finding of any kind naming a rank that is not the culprit (the peers' errors must not blame them).
# The findings' lines (coordinator/): "NIC down on comm C: ...", "hang on comm C: ...", "slow link on
# comm C: ...", "straggler on comm C: ...", "comm C: rank ... died: ..." / "... stopped responding:
# ...". They name ranks as "rank R (place)", "rank R (place),S (place)" (a hang's or a death's
# list), "ranks R, S (place)" (NIC down, several ranks of a process), "rank R -> rank S" (slow link),
# and "+K more" for ranks not spelled out. With the places' parentheses dropped (their pids, GPUs and
# addresses are numbers too) every form is "rank(s) R[, S...]"; a "+K more" is K ranks unseen, wrong.
findings=$(grep -E "autoha (ERROR|WARN) [a-z]+: (NIC down on comm|hang on comm|slow link on comm|straggler on comm|comm [0-9a-f]+: rank .*(died|stopped responding))" "$log" |
  sed -E 's/^.* autoha (ERROR|WARN) [a-z]+: //; s/\([^)]*\)//g')
wrong=$(grep -oE "ranks? [0-9]+( *, *[0-9]+)*" <<<"$findings" | grep -oE "[0-9]+" | sort -u |
  grep -vxF -f <(tr ' ' '\n' <<<"$want") | tr '\n' ' ')
more=$(grep -oE "\+[0-9]+ more" <<<"$findings" | head -1)
[ -z "$more" ] || wrong="${wrong}unnamed:${more//[^0-9]/} "
# the same in the events AUTOHA_HEALTH_CMD got: each rank at fault of a finding that blames
# (every kind but resumed, recovered and link_ok)
ev_wrong=$(grep -LE '"kind": "(resumed|recovered|link_ok)"' "$events"/*.json 2>/dev/null |
  xargs -r grep -ohE '"rank": [0-9]+' | grep -oE "[0-9]+" | sort -u |
  grep -vxF -f <(tr ' ' '\n' <<<"$want") | tr '\n' ' ')
[ -z "$ev_wrong" ] || wrong="$wrong$(sed -E 's/([0-9]+)/event:\1/g' <<<"$ev_wrong")"
t1=$(grep -E "$re" "$log" | sed -nE 's/^\[([0-9-]+ [0-9:.]+)\].*/\1/p' | sort | sed -n 4p)
latency=none
if [ -n "$t1" ]; then
  latency=$(awk -v a="$t_start" -v b="$(date -d "$t1" +%s.%N)" -v f="$fault_s" 'BEGIN { printf "%.2f", b - a - f }')
fi
nwrong=$(wc -w <<<"$wrong")
echo "RESULT shape=nic-down-$side named=$nproc wrong=$nwrong latency=$latency"
if [ "$named" != "$want" ]; then
  echo "FAIL: the finding names rank(s) '$named', NCCL's errors say '$want'"; grep -E "NIC|NET/IB" "$log" | head -8; fail=1
fi
[ "$nproc" -ge 4 ] || { echo "FAIL: $nproc of 4 processes logged the finding"; grep -E "autoha|NET/IB" "$log" | head -8; fail=1; }
[ "$nwrong" = 0 ] || { echo "FAIL: a finding names rank(s) $wrong, not at fault"; grep -E "autoha (ERROR|WARN)" "$log" | head -5; fail=1; }
# (no 4th line at all already failed above)
if [ "$latency" != none ]; then
  awk -v t="$latency" -v b="$bound_s" 'BEGIN { exit !(t <= b) }' ||
    { echo "FAIL: named $latency s after the fault (bound $bound_s s)"; fail=1; }
fi
nev=$(grep -l '"kind": "nic_down"' "$events"/*.json 2>/dev/null | xargs -r grep -lE "\"ranks\": \[\{\"rank\": ${want%% *}," | wc -l)
[ "$nev" -ge 4 ] || { echo "FAIL: AUTOHA_HEALTH_CMD ran with nic_down naming rank $want $nev times (want 4)"; fail=1; }
nrep=$(grep -lE '"kind": *"nic_down"' "$work"/rep/*.json 2>/dev/null | wc -l)
[ "$nrep" -ge 4 ] || { echo "FAIL: $nrep of 4 reports hold the finding in their health section"; fail=1; }
if [ $fail = 0 ]; then
  echo "ok: $dev port $port of node$node down, AUTOHA_HA=off: rank $want named by $nproc of 4 processes $latency s after the fault (bound $bound_s s), nobody else: $(sed -E 's/.*autoha ERROR [a-z]+: //' <<<"$lines" | head -1)"
fi
exit $fail
