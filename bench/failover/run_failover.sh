#!/usr/bin/env bash
# bench/failover: autoha's failover measured end to end on sim/'s verbs provider and fabric.
# Jobs of 2x8 and 4x8 ranks (failover_job: checked AllReduce/AllGather calls, sim/'s 8 dual-port
# 200G NICs per node on a 1:1 leaf-spine; bonded for policy path, two verbs ports per NIC for port
# and nic) run under ncclsim-run with LD_PRELOAD=libautoha.so, AUTOHA_HA=<policy> and the fabric's
# topology file (AUTOHA_QP_TOPO, from ncclsim-fabric, which sits beside ncclsim-run: the path
# policy picks shadow ports from it), and a fault injected at a random wall time of the run
# (NCCLSIM_FABRIC_FAULTS at=Xs):
#   path  a leaf-spine link fails, both directions (FAILOVER_PATH_TARGET=spine: a whole spine,
#         its links to every leaf of the job, so every flow through it must move)
#   port  port 1 of a dual-port NIC goes down (the port NCCL uses)
#   nic   a whole NIC goes down, both ports (nicdown); its queue pairs move to their shadows on
#         the neighbour NIC mlx5_(i^1)
# (in 10-60% of a control run's length) and, at every third point, a second fault during the recovery of the first (a leaf-spine link,
# 10-300 ms later). Per point: the job completed with correct results (every element checked) and
# the provider's counters (ncclsimNetStats, docs/sim-nccl.md) say 0 lost, 0 duplicated, 0
# reordered, 0 completions for WRs never posted or completed twice. Stalls: per failover, the
# autoha report's `ha` section's stall_ms values (when the library writes them); per point, the
# provider's longest wall-time gap between completions of a connection (detection included).
# Last, "all paths down": every port of node 1 goes down; every rank must fail with NCCL's error
# within the bound (no hang).
# Then "the real retry window" (FAILOVER_WINDOW_POINTS, default 2, points each): NCCLSIM_VERBS_TIMEOUT_SCALE=1,
# AUTOHA_HA=port, a port down once the shadows are ready, the soft timeout on auto, run with
# autoha's RC timeout (AUTOHA_HA_IB_TIMEOUT, default 14) and with NCCL's (AUTOHA_HA_IB_TIMEOUT=0: 20, 34 s):
# the stall a user sees is the provider's longest wait between completions of a connection,
# detection included. Bar: at most 1 s with autoha's timeout.
# Figures printed last with OK/FAILED; exit non-zero when a point fails.
#   run_failover.sh NCCLSIM_RUN FAILOVER_JOB LIBAUTOHA SIMLIB_DIR
# Settings (environment):
#   FAILOVER_POINTS  fault points per policy (default 20; the issue's acceptance asks 200)
#   FAILOVER_POLICY  path, port, nic or a list "path port nic" (default path)
#   FAILOVER_NODES   node counts to alternate between (default "2 4")
#   FAILOVER_SEED    seed of the random points (default 1)
#   FAILOVER_PATH_TARGET  link (default) or spine: what policy path's fault takes down
#   FAILOVER_LINK_LAYER  roce (default) or ib: InfiniBand HCAs (ib=1: queue pairs addressed by LID,
#                    no GRH, ports never bonded) on a subnet of two planes (planes=2: port 1 and
#                    port 2 of every HCA share no switch); policies port and nic only (path moves
#                    a RoCE source port), and a second fault takes a link of its leaf's plane
#   FAILOVER_KEEP    a folder to keep every job's output in (default: a temporary one, removed)
#   FAILOVER_PARTS   which parts run: any of "points alldown window" (default all three)
#   FAILOVER_WINDOW_POINTS  fault points of each run of the real-window part (default 2)
#   NCCLSIM_VERBS_TIMEOUT_SCALE  the RC retry window's scale (default 0.01: 0.34 s for NCCL's 20/7)
#   NCCLSIM_NET_LOST_MS  when a completion counts as lost (default 30000: above autoha's failover
#                    bounds, so a failover that is only slow shows as a stall, not a loss)
#   AUTOHA_HA_SOFT_TIMEOUT_S  autoha's soft timeout (default here 2: well above the scaled 0.34 s
#                    retry window); bar: the p99 stall per failover <= it + 50 ms
# Any AUTOHA_HA_* setting in the environment reaches the jobs.
set -u
# A single-host job: its hub listens on loopback unless the caller named an interface.
export AUTOHA_COORD_IFNAME=${AUTOHA_COORD_IFNAME:-lo}
run=$1 job=$2 lib=$3 simlib=$4
points=${FAILOVER_POINTS:-20} policies=${FAILOVER_POLICY:-path} node_list=${FAILOVER_NODES:-2 4}
path_target=${FAILOVER_PATH_TARGET:-link}
case $path_target in link | spine) ;; *) echo "failover: FAILOVER_PATH_TARGET must be link or spine, not '$path_target'"; exit 2 ;; esac
link_layer=${FAILOVER_LINK_LAYER:-roce}
case $link_layer in
roce) topo_spec=nic=8x200x2 ib_fabric="" ll_name=RoCE ;;
ib) topo_spec=nic=8x200x2,ib=1 ib_fabric=,planes=2 ll_name=InfiniBand
    for p in $policies; do
      [ "$p" != path ] || { echo "failover: FAILOVER_LINK_LAYER=ib takes policies port and nic, not path (an IB queue pair has no UDP source port)"; exit 2; }
    done ;;
*) echo "failover: FAILOVER_LINK_LAYER must be roce or ib, not '$link_layer'"; exit 2 ;;
esac
RANDOM=${FAILOVER_SEED:-1}
case $points in '' | *[!0-9]*) echo "failover: FAILOVER_POINTS must be a number, not '$points'"; exit 2 ;; esac
work=${FAILOVER_KEEP:-}
if [ -z "$work" ]; then work=$(mktemp -d); trap 'rm -rf "$work"' EXIT; else mkdir -p "$work"; fi
fabric_tool=$(dirname "$run")/ncclsim-fabric
fab_base=bond=1
[ "$link_layer" = ib ] && fab_base=bond=0
export LD_LIBRARY_PATH="$simlib" NCCLSIM_TOPO="$topo_spec" NCCLSIM_FABRIC="$fab_base$ib_fabric" NCCLSIM_RUN_GRACE_S=5 \
  NCCLSIM_TIMEOUT_S=60 NCCLSIM_VERBS_TIMEOUT_SCALE=${NCCLSIM_VERBS_TIMEOUT_SCALE:-0.01} \
  NCCLSIM_NET_LOST_MS=${NCCLSIM_NET_LOST_MS:-30000} AUTOHA_HA_SOFT_TIMEOUT_S=${AUTOHA_HA_SOFT_TIMEOUT_S:-2}
stall_bar=$(awk -v s="$AUTOHA_HA_SOFT_TIMEOUT_S" 'BEGIN {printf "%.0f", s * 1000 + 50}')
iters_of() { echo $((120 / $1)); } # 60 iterations on 2 nodes, 30 on 4: a few seconds each on 2 cores
ok=1
begin=$(date +%s)

# per-job helpers: the counters' sum over ranks, and the longest stall of the job
field() { grep -oE "^failover_job: rank [0-9]+ .*" "$1" | grep -oE " $2 [0-9.]+" | awk '{s += $2} END {print s + 0}'; }
stall() { grep -oE "^failover_job: rank [0-9]+ .*" "$1" | grep -oE "stall-wall-ms [0-9.]+" | awk '$2 > m {m = $2} END {print m + 0}'; }
ha_stalls() { # the autoha report's ha section, when the library writes one: its stall_ms values
  [ -d "$1" ] || return 0
  find "$1" -name '*.json' -exec jq -r '.. | objects | select(has("ha")) | .ha | .. | objects | .stall_ms? // empty' {} + 2>/dev/null
}
pct() { sort -g | awk -v p="$1" '{v[NR] = $1} END {if (!NR) {print "-"; exit} i = int(p * NR + 0.999999); if (i < 1) i = 1; print v[i]}'; }
rand_ms() { echo $(( $1 + (RANDOM * 32768 + RANDOM) % ($2 - $1 + 1) )); }
secs() { awk -v ms="$1" 'BEGIN {printf "%.3f", ms / 1000}'; }

parts=${FAILOVER_PARTS:-points alldown window}
has_part() { case " $parts " in *" $1 "*) return 0 ;; esac; return 1; }
control_nodes=$node_list # the real-window part runs 2 x 8 jobs
has_part window && case " $node_list " in *" 2 "*) ;; *) control_nodes+=" 2" ;; esac

# control: each size once without a fault (and without autoha), for the run's length and the
# peace-time stall
declare -A len peace
for nodes in $control_nodes; do
  log=$work/control-$nodes.log t0=$(date +%s%N)
  if ! timeout 300 "$run" -n $((nodes * 8)) --nodes "$nodes" -- "$job" --iters "$(iters_of "$nodes")" >"$log" 2>&1; then
    echo "failover: the control job on $nodes nodes failed ($log):"; tail -3 "$log"; exit 1
  fi
  len[$nodes]=$(( ($(date +%s%N) - t0) / 1000000 ))
  peace[$nodes]=$(stall "$log")
  echo "failover: control ($ll_name), $nodes x 8, no fault, no autoha: $(iters_of "$nodes") iterations in ${len[$nodes]} ms, longest stall ${peace[$nodes]} ms"
done

has_part points || policies=""
for policy in $policies; do
  case $policy in path | port | nic) ;; *) echo "failover: unknown policy '$policy' (expected path, port or nic)"; exit 2 ;; esac
  : >"$work/stalls-$policy"
  : >"$work/waits-$policy"
  fab=bond=1
  [ "$policy" = path ] || fab=bond=0 # port fails over to the NIC's other verbs port, nic to another NIC
  fab+=$ib_fabric
  for nodes in $node_list; do # the planner's model knows bonded NICs only: path's file
    : >"$work/topo-$policy-$nodes"
    [ "$policy" = path ] || continue
    NCCLSIM_FABRIC=$fab "$fabric_tool" topo "$nodes" >"$work/topo-$policy-$nodes" ||
      { echo "failover: $fabric_tool could not write the topology file"; exit 1; }
  done
  done_ok=0 failed=0 lost=0 dup=0 bad=0 second=0 failovers=0 hit=0 late=0
  for i in $(seq 1 "$points"); do
    set -- $node_list
    nodes=$(eval echo "\${$(( (i - 1) % $# + 1 ))}")
    # a point in 10-60% of the control's run (job start-up included): a loaded machine may run
    # the job faster than the control, and a fault after its end misses
    at=$(rand_ms $(( len[$nodes] / 10 )) $(( len[$nodes] * 6 / 10 )))
    node=$((RANDOM % nodes)) nic=$((RANDOM % 8)) spine=$((RANDOM % 8))
    case $policy in
    path)
      spec=""
      if [ "$path_target" = spine ]; then
        for leaf in $(seq 0 $((2 * nodes - 1))); do spec+="at=$(secs "$at")s:down:leaf$leaf-spine$spine;"; done
      else
        spec="at=$(secs "$at")s:down:leaf$((RANDOM % (2 * nodes)))-spine$spine;"
      fi ;;
    port) spec="at=$(secs "$at")s:portdown:node$node/mlx5_$nic:1;" ;;
    nic) spec="at=$(secs "$at")s:nicdown:node$node/mlx5_$nic;" ;;
    esac
    if [ $((i % 3)) = 0 ]; then # a second fault while the first is being recovered
      at2=$((at + $(rand_ms 10 300))) leaf2=$((RANDOM % (2 * nodes))) spine2=$(( (spine + 1 + RANDOM % 7) % 8 ))
      # two planes: a leaf has uplinks to its own plane's spines only (even leaves, even spines)
      [ "$link_layer" = ib ] && spine2=$(( spine2 / 2 * 2 + leaf2 % 2 ))
      spec+="at=$(secs "$at2")s:down:leaf$leaf2-spine$spine2;"
      second=$((second + 1))
    fi
    log=$work/$policy-$i.log rep=$work/$policy-$i-report
    t0=$(date +%s%N)
    NCCLSIM_FABRIC=$fab NCCLSIM_FABRIC_FAULTS="$spec" LD_PRELOAD="$lib" AUTOHA_HA="$policy" \
      AUTOHA_QP_TOPO="$([ -s "$work/topo-$policy-$nodes" ] && echo "$work/topo-$policy-$nodes")" \
      AUTOHA_REPORT="$rep/%p.json" \
      timeout 600 "$run" -n $((nodes * 8)) --nodes "$nodes" -- "$job" --iters "$(iters_of "$nodes")" >"$log" 2>&1
    rc=$? took=$(( ($(date +%s%N) - t0) / 1000000 ))
    echo "# $spec" >>"$log"
    l=$(field "$log" lost) d=$(( $(field "$log" duplicated) + $(field "$log" reordered) ))
    b=$(( $(field "$log" unposted) + $(field "$log" send-duplicated) ))
    lost=$((lost + l)) dup=$((dup + d)) bad=$((bad + b))
    f=$(grep -c "failed over" "$log")
    failovers=$((failovers + f))
    # hit: the fault reached the job (a failover logged, or the job failed); a job that ended
    # before the fault's time was missed by it
    if [ "$f" -gt 0 ] || [ $rc != 0 ]; then hit=$((hit + 1)); elif [ "$took" -lt "$at" ]; then late=$((late + 1)); fi
    if [ $rc = 0 ] && [ "$(grep -c '^failover_job: rank' "$log")" = $((nodes * 8)) ] && [ $((l + d + b)) = 0 ]; then
      done_ok=$((done_ok + 1))
      ha_stalls "$rep" >>"$work/stalls-$policy"
      stall "$log" >>"$work/waits-$policy"
    else
      failed=$((failed + 1)) ok=0
      [ $failed -le 3 ] && { echo "failover: $policy point $i ($nodes x 8, rc $rc, $took ms, faults $spec) failed:";
                             grep -m2 -E "failed|error|Error" "$log" | cut -c1-300; }
    fi
  done
  printf 'failover: AUTOHA_HA=%s on %s, %d points (%d with a second fault during recovery; %d hit the job, %d ended before the fault, the rest hit no flow; %d failovers logged by autoha): %d completed with correct results, %d failed; lost %d, duplicated/reordered %d, unposted/twice %d\n' \
    "$policy" "$ll_name" "$points" "$second" "$hit" "$late" "$failovers" "$done_ok" "$failed" "$lost" "$dup" "$bad"
  [ "$hit" -gt 0 ] || { echo "failover: AUTOHA_HA=$policy: no point reached the job"; ok=0; }
  printf 'failover: AUTOHA_HA=%s on %s, completed points: stall per failover (the autoha report'"'"'s ha section, %d failovers) median %s ms, p99 %s ms; longest wait between completions per point (the provider'"'"'s counters, detection included) median %s ms, p99 %s ms (peace time: %s)\n' \
    "$policy" "$ll_name" "$(wc -l <"$work/stalls-$policy")" "$(pct 0.5 <"$work/stalls-$policy")" "$(pct 0.99 <"$work/stalls-$policy")" \
    "$(pct 0.5 <"$work/waits-$policy")" "$(pct 0.99 <"$work/waits-$policy")" \
    "$(for n in $node_list; do printf '%s x 8 %s ms ' "$n" "${peace[$n]}"; done | sed 's/ $//')"
  p99=$(pct 0.99 <"$work/stalls-$policy")
  if [ "$p99" != - ] && ! awk -v p="$p99" -v b="$stall_bar" 'BEGIN {exit !(p <= b)}'; then
    echo "failover: AUTOHA_HA=$policy: p99 stall per failover $p99 ms above the soft timeout + 50 ms ($stall_bar ms)"; ok=0
  fi
done

# all paths down: every port of node 1 at 1 s; every rank fails with NCCL's error within the bound
all_down=skipped
if has_part alldown; then
bound=$(awk -v s="$NCCLSIM_VERBS_TIMEOUT_SCALE" 'BEGIN {printf "%d", 34.4 * s * 2 + 30}')
spec=""
for nic in $(seq 0 7); do spec+="at=1s:portdown:node1/mlx5_$nic:1;at=1s:portdown:node1/mlx5_$nic:2;"; done
log=$work/all-down.log t0=$(date +%s)
first=${policies%% *} fab=bond=1
[ "$first" = path ] || fab=bond=0
fab+=$ib_fabric
: >"$work/topo-all-down"
if [ "$first" = path ]; then
  NCCLSIM_FABRIC=$fab "$fabric_tool" topo 2 >"$work/topo-all-down" || { echo "failover: no topology file"; exit 1; }
fi
NCCLSIM_FABRIC=$fab NCCLSIM_FABRIC_FAULTS="$spec" LD_PRELOAD="$lib" AUTOHA_HA="$first" \
  AUTOHA_QP_TOPO="$([ -s "$work/topo-all-down" ] && echo "$work/topo-all-down")" AUTOHA_REPORT=off \
  timeout 600 "$run" -n 16 --nodes 2 -- "$job" --iters 1000000 >"$log" 2>&1
rc=$? took=$(( $(date +%s) - t0 ))
nccl_err=$(grep -cE "^failover_job: rank [0-9]+: .* failed: " "$log")
all_ok=1
{ [ $rc != 0 ] && [ $rc != 124 ] && [ "$took" -le "$bound" ]; } || all_ok=0
# every rank exits on its own error: NCCL's (NET/IB ...) for the ranks whose QPs died, a peer's
# exit for the rest, as NCCL's ranks do when their peers leave; none is killed by the launcher
grep -q "NET/IB: " "$log" || all_ok=0
grep -q "was killed by signal" "$log" && all_ok=0
echo "failover: all paths down ($ll_name, every port of node 1, 2 x 8): job ended in $took s (bound $bound s), rc $rc," \
  "$nccl_err of 16 ranks reported a failed call: $([ $all_ok = 1 ] && echo ok || echo NOT ok)"
[ $all_ok = 1 ] || { ok=0; grep -m3 -E "failed|killed" "$log" | cut -c1-300; }
all_down="within the bound"
fi

# the real retry window: the stall a user sees, with autoha's RC timeout and with NCCL's
window_fig="not run" window_ok=1
if has_part window; then
  wpoints=${FAILOVER_WINDOW_POINTS:-2}
  case $wpoints in '' | *[!0-9]*) echo "failover: FAILOVER_WINDOW_POINTS must be a number, not '$wpoints'"; exit 2 ;; esac
  declare -A wmax
  for mode in autoha nccl; do
    wmax[$mode]=0
    : >"$work/window-$mode"
    for i in $(seq 1 "$wpoints"); do
      # 3-4 s in, after every shadow is ready (a fault before that is held until one is), in a job
      # that runs at least 8 s without a fault
      at=$(rand_ms 3000 4000) witers=$(( $(iters_of 2) * (8000 / (len[2] + 1) + 1) ))
      node=$((RANDOM % 2)) nic=$((RANDOM % 8))
      log=$work/window-$mode-$i.log
      ibt=() # NCCL's: AUTOHA_HA_IB_TIMEOUT=0 keeps its 20
      [ $mode = nccl ] && ibt=(AUTOHA_HA_IB_TIMEOUT=0)
      env NCCLSIM_FABRIC=bond=0 NCCLSIM_VERBS_TIMEOUT_SCALE=1 NCCLSIM_NET_LOST_MS=120000 NCCLSIM_TIMEOUT_S=120 \
        NCCLSIM_FABRIC_FAULTS="at=$(secs "$at")s:portdown:node$node/mlx5_$nic:1" LD_PRELOAD="$lib" AUTOHA_HA=port \
        AUTOHA_HA_SOFT_TIMEOUT_S=0 "${ibt[@]}" AUTOHA_REPORT=off \
        timeout 600 "$run" -n 16 --nodes 2 -- "$job" --iters "$witers" >"$log" 2>&1
      rc=$?
      f=$(grep -c "failed over" "$log") w=$(stall "$log")
      if [ $rc != 0 ] || [ "$f" = 0 ] || [ "$(grep -c '^failover_job: rank' "$log")" != 16 ]; then
        echo "failover: real window, $mode's RC timeout, point $i (port node$node/mlx5_$nic:1 at $(secs "$at") s): rc $rc, $f failovers: not a completed failover"
        grep -m2 -E "failed|error|Error" "$log" | cut -c1-300
        window_ok=0
        continue
      fi
      echo "$w" >>"$work/window-$mode"
      awk -v a="$w" -v b="${wmax[$mode]}" 'BEGIN {exit !(a > b)}' && wmax[$mode]=$w
      echo "failover: real window, $mode's RC timeout, point $i: port node$node/mlx5_$nic:1 down at $(secs "$at") s, $f failovers, longest wait between completions $w ms"
    done
    [ -s "$work/window-$mode" ] || window_ok=0
  done
  awk -v w="${wmax[autoha]}" 'BEGIN {exit !(w <= 1000)}' || window_ok=0
  [ $window_ok = 1 ] || ok=0
  window_fig="${wmax[autoha]} ms with autoha's RC timeout (AUTOHA_HA_IB_TIMEOUT), ${wmax[nccl]} ms with NCCL's (bar 1000 ms): $([ $window_ok = 1 ] && echo OK || echo FAILED)"
  echo "failover: real retry window (NCCLSIM_VERBS_TIMEOUT_SCALE=1, AUTOHA_HA=port, 2 x 8, $wpoints points each), longest stall a user sees: $window_fig"
fi

echo "failover (sim/, $ll_name, $(( $(date +%s) - begin )) s; bar: every point completes with correct results and 0 lost/duplicated" \
  "completions, p99 stall per failover <= AUTOHA_HA_SOFT_TIMEOUT_S + 50 ms ($stall_bar ms); all paths down ends within" \
  "the bound ($all_down); at the real retry window a user's stall <= 1 s): real-window stall $window_fig;" \
  "$([ $ok = 1 ] && echo OK || echo FAILED)"
[ $ok = 1 ]
