#!/usr/bin/env bash
# A NIC port taken down under a running job, on sim/'s verbs provider and fabric: 4 ranks on 2
# nodes (channel c on NIC c mod 8, owned by local rank (c mod 8) mod 2), node1/mlx5_3's port down
# 1 s in. The queue pairs on mlx5_3 (ranks 1 and 3) fail with RETRY_EXC_ERR after the scaled
# retry timeout and their collective fails with NCCL's error; no other rank's queue pairs see an
# error; the job ends by itself within a bounded time.
#   run_fabric_faults.sh NCCLSIM_RUN TRAIN_JOB SIMLIB_DIR
set -u
run=$1 job=$2 simlib=$3
fail() { printf 'FAIL: %s\n--- output ---\n%s\n' "$1" "$out"; exit 1; }
export LD_LIBRARY_PATH="$simlib" NCCLSIM_RUN_GRACE_S=2 NCCLSIM_TIMEOUT_S=20 NCCLSIM_VERBS_TIMEOUT_SCALE=0.01

# Control: the same job without the fault runs clean through the verbs provider.
out=$(timeout 120 "$run" -n 4 --nodes 2 -- "$job" --iters 3 2>&1) || fail "control: the job failed"
grep -q "NET/IB" <<<"$out" && fail "control: an IB error without a fault"
# and with 2 QPs per connection, whole chunks split over them (every piece is checked on arrival)
out=$(NCCL_IB_QPS_PER_CONNECTION=2 NCCL_IB_SPLIT_DATA_ON_QPS=1 NCCLSIM_NET_CARRY_KB=0 timeout 120 "$run" -n 4 --nodes 2 -- "$job" --iters 3 2>&1) ||
  fail "control, 2 QPs per connection: the job failed"

start=$(date +%s)
out=$(NCCLSIM_FABRIC_FAULTS="at=1s:portdown:node1/mlx5_3:1" timeout 120 "$run" -n 4 --nodes 2 -- \
      "$job" --iters 1000000 2>&1); rc=$?
took=$(( $(date +%s) - start ))
[ $rc -ne 0 ] && [ $rc -ne 124 ] || fail "the job should fail by itself (rc $rc)"
[ "$took" -le 30 ] || fail "the job took $took s to end (bound 30 s)"
# NCCL's message, from a rank whose QPs use mlx5_3, with the transport retry status
grep -qE "NET/IB: Got completion from peer .* with status=transport retry counter exceeded\(12\).* hca mlx5_3 \(rank [13]," <<<"$out" ||
  fail "no RETRY_EXC_ERR completion on mlx5_3"
errs=$(grep -oE "NET/IB: Got completion .* hca mlx5_[0-9]+ \(rank [0-9]+" <<<"$out" | grep -oE "mlx5_[0-9]+ \(rank [0-9]+" | sort -u)
while read -r line; do
  case $line in "mlx5_3 (rank 1" | "mlx5_3 (rank 3") ;; *) fail "an unaffected queue pair saw an error: $line" ;; esac
done <<<"$errs"
grep -qE "ncclRemoteError|remote process exited or there was a network error" <<<"$out" || fail "the collective did not fail with ncclRemoteError"
echo "ok: port down -> RETRY_EXC_ERR on mlx5_3 only, job failed in $took s"
