#!/usr/bin/env bash
# bench/fabric: the first end-to-end figure of autoha's QP hook, on sim/'s verbs provider and RoCE
# fabric. 2 and 4 nodes x 8 GPUs with 8 dual-port NICs each (2 x 200 Gb/s, bonded), on a 1:1
# leaf-spine, for 20 switch hash seeds: the modelled busbw of 256 MiB AllReduce and AllGather
#   - with NCCL's queue pairs as NCCL makes them (flow label 0: ports from the QP numbers),
#   - with libautoha.so preloaded, AUTOHA_QP_SPORT=plan and the topology file of the same fabric,
#   - without collisions (the same job with NCCL_IB_DISABLE=1: sim/'s calibrated network).
# Every job also moves real AllReduce/AllGather data through the queue pairs and checks it.
# Bar: planned ports within 5% of the collision-free busbw for every seed; NCCL's ports below it
# (median over seeds). All figures are sim/'s.
#   run_fabric.sh NCCLSIM_RUN FABRIC_PERF NCCLSIM_FABRIC_TOOL LIBAUTOHA SIMLIB_DIR
set -u
# A single-host job: its hub listens on loopback unless the caller named an interface.
export AUTOHA_COORD_IFNAME=${AUTOHA_COORD_IFNAME:-lo}
run=$1 perf=$2 tool=$3 lib=$4 simlib=$5
seeds=${FABRIC_SEEDS:-20}
bytes=$((256 << 20))
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
export LD_LIBRARY_PATH="$simlib" NCCLSIM_TOPO="nic=8x200x2" AUTOHA_REPORT=off
ok=1

# busbw LOG COLL: the figure fabric_perf printed for COLL
busbw() { sed -nE "s/^fabric_perf: $2 $bytes B: .* busbw ([0-9.]+) GB\/s/\1/p" "$1"; }
median() { sort -g | awk '{v[NR]=$1} END {print (NR % 2) ? v[(NR+1)/2] : (v[NR/2]+v[NR/2+1])/2}'; }
job() { # NODES LOG [ENV...]: one job; fails the bench if the job fails
  local nodes=$1 log=$2
  shift 2
  env "$@" "$run" -n $((nodes * 8)) --nodes "$nodes" -- "$perf" "$bytes" >"$log" 2>&1 && return 0
  echo "fabric: a job failed ($log):"; tail -5 "$log"; ok=0; return 1
}

for nodes in 2 4; do
  NCCLSIM_FABRIC="bond=1" job "$nodes" "$work/ideal-$nodes.log" NCCL_IB_DISABLE=1 || continue
  for coll in allreduce allgather; do
    ideal=$(busbw "$work/ideal-$nodes.log" $coll)
    : >"$work/nccl-$coll" ; : >"$work/plan-$coll"
    eval "ideal_$coll=$ideal"
  done
  worst_plan=1
  for s in $(seq 1 "$seeds"); do
    fab="bond=1,seeds=$((s * 3 + 1)):$((s * 5 + 2)):$((s * 7 + 3))"
    NCCLSIM_FABRIC=$fab "$tool" topo "$nodes" >"$work/topo-$s" || { echo "fabric: no topology file"; ok=0; continue; }
    # the job: NCCL's rings, 16 channels over 8 NICs = 2 queue pairs per NIC and direction
    echo "job bench 1.0 ring 2 $(seq -s, -f 'node%g' 0 $((nodes - 1)))" >>"$work/topo-$s"
    job "$nodes" "$work/nccl-$nodes-$s.log" NCCLSIM_FABRIC="$fab" || continue
    job "$nodes" "$work/plan-$nodes-$s.log" NCCLSIM_FABRIC="$fab" LD_PRELOAD="$lib" AUTOHA_QP_SPORT=plan \
      AUTOHA_QP_TOPO="$work/topo-$s" || continue
    for coll in allreduce allgather; do
      eval "ideal=\$ideal_$coll"
      n=$(busbw "$work/nccl-$nodes-$s.log" $coll) p=$(busbw "$work/plan-$nodes-$s.log" $coll)
      awk -v x="$n" -v i="$ideal" 'BEGIN {print x / i}' >>"$work/nccl-$coll"
      awk -v x="$p" -v i="$ideal" 'BEGIN {print x / i}' >>"$work/plan-$coll"
    done
  done
  for coll in allreduce allgather; do
    eval "ideal=\$ideal_$coll"
    nmed=$(median <"$work/nccl-$coll") nmin=$(sort -g "$work/nccl-$coll" | head -1)
    pmed=$(median <"$work/plan-$coll") pmin=$(sort -g "$work/plan-$coll" | head -1)
    printf 'fabric: %d nodes x 8, %s 256 MiB: collision-free %.1f GB/s; NCCL ports %.3f of it (median), %.3f (worst); planned ports %.3f (median), %.3f (worst)\n' \
      "$nodes" "$coll" "$ideal" "$nmed" "$nmin" "$pmed" "$pmin"
    awk -v p="$pmin" -v n="$nmed" 'BEGIN {exit !(p >= 0.95 && n < 1.0)}' || ok=0
    [ "$(wc -l <"$work/plan-$coll")" = "$seeds" ] || ok=0
  done
done
echo "fabric: for comparison, the C4 paper measured ~70% of ideal busbw for a 512-GPU job on a 1:1 CLOS" \
  "with ECMP, and ~240 of ~362 Gb/s on dual-port NICs (cross-port receive collisions)"
echo "fabric (sim/, $seeds hash seeds, bar: planned ports >= 0.95 of collision-free in every seed," \
  "NCCL's median below it): $([ $ok = 1 ] && echo OK || echo FAILED)"
[ $ok = 1 ]
