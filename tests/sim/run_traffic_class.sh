#!/usr/bin/env bash
# Traffic classes on sim/'s fabric: communicators A and B (2 ranks on 2 nodes, both nodes on one
# leaf pair, so their flows share exactly the NIC links) with different DSCPs split a shared link
# as the fabric's scheduler says — B's share of its collision-free bandwidth while A has a
# collective in flight:
#   strict priority, A's DSCP 46 above B's 10:  B starved (share < 0.01)
#   strict priority, B's DSCP above A's:        B unaffected (1.000)
#   weighted, DSCP 46 weight 3, DSCP 10 weight 1: B gets a quarter (0.250)
# and a link degraded to half its capacity through ncclsimFabricSetLink halves A's share.
#   run_traffic_class.sh NCCLSIM_RUN SIM_TC_JOB SIMLIB_DIR
set -u
run=$1 job=$2 simlib=$3
export LD_LIBRARY_PATH="$simlib" NCCLSIM_TIMEOUT_S=30
fail() { printf 'FAIL: %s\n--- output ---\n%s\n' "$1" "$out"; exit 1; }
share() { sed -nE 's/^sim_tc_job: B alone ([0-9.]+), B beside A ([0-9.]+)$/\1 \2/p' <<<"$out"; }
tcjob() { NCCLSIM_FABRIC="hostsperpair=2,$1" timeout 60 "$run" -n 2 --nodes 2 -- "$job" "${@:2}" 2>&1; }

out=$(tcjob sched=strict 184 40) || fail "strict: the job failed"
read -r alone beside <<<"$(share)"
[ "$alone" = 1.000 ] || fail "strict: B alone should have its whole share (got $alone)"
awk -v b="$beside" 'BEGIN {exit !(b < 0.01)}' || fail "strict: B beside the higher class A should starve (got $beside)"

out=$(tcjob sched=strict 40 184 "node0/mlx5_0:1->leaf0") || fail "strict, B higher: the job failed"
read -r alone beside <<<"$(share)"
[ "$beside" = 1.000 ] || fail "strict, B higher: B should not notice A (got $beside)"
# ncclsim.h's ncclsimFabricSetLink: NIC 0's uplink at half capacity halves A's slowest flow
grep -q "^sim_tc_job: A with node0/mlx5_0:1->leaf0 at half capacity 0.500$" <<<"$out" ||
  fail "a link degraded through ncclsimFabricSetLink should halve A's share"

out=$(tcjob "sched=wrr:46=3/10=1" 184 40) || fail "wrr: the job failed"
read -r alone beside <<<"$(share)"
[ "$beside" = 0.250 ] || fail "wrr 3:1: B should get a quarter (got $beside)"
echo "ok: strict starves the lower class, spares the higher, wrr 3:1 gives B 0.250"
