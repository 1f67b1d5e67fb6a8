#!/usr/bin/env bash
# Slow-link localisation (docs/diagnosis.md "Slow links") on 4 ranks over 2 simulated nodes, 8
# bonded dual-port NICs each on a 1:1 leaf-spine, libautoha.so preloaded in its default (observe)
# mode with the fabric's model (AUTOHA_QP_TOPO from ncclsim-fabric), NCCL's own source ports (ECMP
# collisions and all), and NCCLSIM_VERBS_PACE_GBPS=1 so that a degraded path's messages take
# longer in wall time, as on a real link (sim/ moves bytes at memory speed otherwise). Every run
# has "congestion from other flows" on links that are not broken: half of leaf 1's uplinks at half
# their rate and two of leaf 3's at a third (the share of a flow in a two- or three-way collision).
#   clean  nothing is named (and the run's debug lines give each queue pair's modelled route)
#   fault  a leaf-spine cable two queue pairs cross is degraded to 5% 3 s in: every process logs a
#          slow_link finding naming that cable within 10 s, and no other link; `autoha status`
#          shows it; AUTOHA_HEALTH_CMD gets it as kind slow_link; the reports' health sections
#          (written every second) hold it
#   run_link_diag.sh NCCLSIM_RUN TRAIN_JOB LIBAUTOHA SIMLIB_DIR AUTOHA_CLI NCCLSIM_FABRIC
# LINK_PCT (default 5) is the rate the cable is degraded to, in percent of its own, and LINK_FAULT_S
# (default 3) when (bench/diagnosis runs 5, 20 and 50 over seeds of it: a cable above
# AUTOHA_SLOW_LINK_PCT's 20% of the median is not meant to be named); the last line says RESULT:
# named = the processes naming the cable, wrong = the lines naming another link (either run),
# latency = the fault to the 4th process's line. LINK_TARGET=nic degrades, instead of a cable, the
# NIC port most sending queue pairs leave on from leaf 0 or 2 (a bonded NIC's port P of node N is on
# leaf 2N + P - 1, docs/sim-fabric.md): the finding must name that port (`port mlx5_K:P`), in any
# of its forms (a cell, a row, a column; tied with a cable it feeds, when the data cannot tell).
set -u
run=$1 job=$2 lib=$3 simlib=$4 cli=$5 fabric=$6
work=$(mktemp -d)
pct=${LINK_PCT:-5} fault_s=${LINK_FAULT_S:-3} bound_s=10 target=${LINK_TARGET:-cable}
shape=link-$pct
[ "$target" = nic ] && shape=nic-slow-$pct
trap 'rm -rf "$work"' EXIT
now() { date +%s.%N; }
export LD_LIBRARY_PATH="$simlib" NCCLSIM_TOPO=nic=8x400x2 NCCLSIM_VERBS_PACE_GBPS=1 \
  AUTOHA_COORD_IFNAME=lo NCCLSIM_TIMEOUT_S=300 NCCLSIM_RUN_GRACE_S=2
NCCLSIM_NODES=2 "$fabric" topo 2 >"$work/topo" || { echo "FAIL: ncclsim-fabric topo failed"; exit 1; }
export AUTOHA_QP_TOPO="$work/topo"
congest=""
for s in 0 1 2 3; do congest+="at=0s:degrade=0.5:leaf1-spine$s;"; done
for s in 0 1; do congest+="at=0s:degrade=0.34:leaf3-spine$s;"; done
fail=0

# clean: the same job and congestion, no fault: nothing named
log=$work/clean.log
AUTOHA_LOG=debug AUTOHA_LOG_SUBSYS=health AUTOHA_REPORT="$work/clean/%h-%p.json" \
  NCCLSIM_FABRIC_FAULTS="$congest" LD_PRELOAD="$lib" timeout 250 "$run" -n 4 --nodes 2 -- "$job" \
  --iters 120 >"$log" 2>&1 || { echo "FAIL clean: the job failed"; tail -5 "$log"; fail=1; }
windows=$(grep -c "autoha DEBUG health: link: QP" "$log")
wrong=$(grep -c "slow link on" "$log")
if [ "$wrong" != 0 ]; then
  echo "FAIL clean: a link was named:"; grep "slow link on" "$log" | head -3; fail=1
else
  echo "clean: 4 ranks, $windows queue-pair windows measured, no link named: ok"
fi
# the cable most sending queue pairs cross from leaf 0 or 2 (not congested), as the model routes them
cable=$(grep -oE "link: QP [0-9]+ .*route leaf[0-9]+-spine[0-9]+-leaf[0-9]+" "$log" |
  sed -E 's/^link: QP ([0-9]+) .*route (leaf[0-9]+)-(spine[0-9]+)-(leaf[0-9]+)$/\1 \2-\3\n\1 \4-\3/' |
  sort -u | awk '{ print $2 }' | grep -E "^leaf[02]-" | sort | uniq -c | sort -k1,1nr -k2,2 |
  awk 'NR == 1 { print $2 }')
hop="link $cable" aim=$cable
if [ "$target" = nic ]; then
  # the NIC port most sending queue pairs leave on from leaf 0 or 2: node leaf/2, port leaf%2 + 1
  aim=$(grep -oE "link: QP [0-9]+ \(mlx5_[0-9]+:[0-9]+, .*route leaf[0-9]+-spine" "$log" |
    sed -E 's/^link: QP ([0-9]+) \((mlx5_[0-9]+):[0-9]+, .*route leaf([0-9]+)-spine$/\1 \2 \3/' |
    sort -u | awk '$3 == 0 || $3 == 2 { print "node" int($3 / 2) "/" $2 ":" ($3 % 2 + 1) }' |
    sort | uniq -c | sort -k1,1nr -k2,2 | awk 'NR == 1 { print $2 }')
  # its address, as the hop names it (a bonded NIC has one: the topology's)
  addr=$(awk -v n="${aim%%/*}" -v d="$(sed -E 's|.*/(mlx5_[0-9]+):.*|\1|' <<<"$aim")" \
    '$1 == "nic" && $2 == n && $3 == d { print $4; exit }' "$AUTOHA_QP_TOPO")
  cable=$aim hop="port ${aim#*/} \\(${addr//./\\.}\\)"
  [ -n "$addr" ] || cable=""
fi
if [ -z "$cable" ]; then
  echo "FAIL: no route in the clean run's debug lines"; grep -m3 "link: QP" "$log"
  echo "RESULT shape=$shape named=0 wrong=$wrong latency=none"
  exit 1
fi

# fault: the cable (or the NIC port) at pct% from fault_s on
log=$work/fault.log cred=$work/hub.cred events=$work/events
mkdir -p "$events"
t_start=$(now)
AUTOHA_LOG_TIME=1 AUTOHA_STATUS_FILE="$cred" AUTOHA_REPORT="$work/fault/%h-%p.json" AUTOHA_REPORT_INTERVAL_S=1 \
  AUTOHA_HEALTH_CMD="cat > $events/\$\$.json" \
  NCCLSIM_FABRIC_FAULTS="${congest}at=${fault_s}s:degrade=$(awk -v p="$pct" 'BEGIN { print p / 100 }'):$cable" LD_PRELOAD="$lib" \
  setsid "$run" -n 4 --nodes 2 -- "$job" --iters 2000 >"$log" 2>&1 &
pid=$!
re="WARN [a-z]+: slow link on comm [0-9a-f]+: rank [0-9] \\([^)]*\\) -> rank [0-9] \\([^)]*\\) at [0-9.]+ Gb/s, [0-9.]+% of the median [0-9.]+: link ${cable}[;, ]"
# a NIC port: any form of the line (cell, row, column), the port among its hops
[ "$target" = nic ] && re="WARN [a-z]+: slow link on comm [0-9a-f]+: .*: [^;]*${hop}"
n=0 t1=
for _ in $(seq $(( (fault_s + 30) * 10 ))); do
  # every process logs every finding: 4 lines of the first one (a port: 4 processes naming it)
  if [ "$target" = nic ]; then
    n=$(grep -E "$re" "$log" 2>/dev/null | sed -nE 's/^\[[^]]*\] [^:]+:([0-9]+):.*/\1/p' | sort -u | wc -l)
  else
    n=$(grep -E "$re" "$log" 2>/dev/null | sed -E 's/.*(slow link on comm [0-9a-f]+: rank [0-9]) .* -> (rank [0-9]).*/\1 \2/' |
      sort | uniq -c | sort -nr | awk 'NR == 1 { print $1 }')
  fi
  n=${n:-0}
  if [ "$n" -ge 4 ]; then t1=$(now); break; fi
  kill -0 "$pid" 2>/dev/null || break
  sleep 0.1
done
sleep 1.5 # a report interval and a command's start: the finding reaches both
status=$("$cli" status "$cred" 2>&1)
kill -TERM -- -"$pid" 2>/dev/null
wait "$pid" 2>/dev/null
rm -f /dev/shm/ncclsim-"$pid"-* # what the job ended by a signal leaves (its prefix is the launcher's pid)
wrong=$((wrong + $(grep "slow link on" "$log" | grep -vcE "$re")))
if [ -z "$t1" ]; then
  echo "RESULT shape=$shape named=$n wrong=$wrong latency=none"
  echo "FAIL fault: $n of 4 processes named $cable at $pct%"; grep -E "slow link|link_ok|at speed" "$log" | head -5; tail -3 "$log"; fail=1
else
  took=$(awk -v a="$t_start" -v b="$t1" -v f="$fault_s" 'BEGIN { printf "%.1f", b - a - f }')
  echo "RESULT shape=$shape named=$n wrong=$wrong latency=$took"
  awk -v t="$took" -v b="$bound_s" 'BEGIN { exit !(t <= b) }' ||
    { echo "FAIL fault: named $took s after the fault (bound $bound_s s)"; fail=1; }
  other=$(grep "slow link on" "$log" | grep -vE "$re")
  [ -z "$other" ] || { echo "FAIL fault: another link was named:"; head -3 <<<"$other"; fail=1; }
  grep -qE "^  finding: slow link on comm [0-9a-f]+: .* $hop" <<<"$status" ||
    { echo "FAIL fault: autoha status does not show it:"; head -5 <<<"$status"; fail=1; }
  nev=$(grep -l '"kind": "slow_link"' "$events"/*.json 2>/dev/null | wc -l)
  [ "$nev" -ge 4 ] || { echo "FAIL fault: AUTOHA_HEALTH_CMD ran with slow_link $nev times (want 4)"; fail=1; }
  nrep=$(grep -lE '"kind": *"slow_link"' "$work"/fault/*.json 2>/dev/null | wc -l)
  [ "$nrep" -ge 4 ] || { echo "FAIL fault: $nrep of 4 reports hold the finding"; fail=1; }
  line=$(grep -m1 -E "$re" "$log" | sed -E 's/.*autoha WARN [a-z]+: //')
  [ $fail = 0 ] && echo "fault: $cable at $pct% named by 4 of 4 processes $took s after the fault (bound $bound_s s): $line"
fi
exit $fail
