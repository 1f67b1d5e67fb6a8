#!/usr/bin/env bash
# Transparent failover of InfiniBand queue pairs end to end (docs/ha.md, "InfiniBand"): sim/'s
# fabric with ib=1 (ports report link layer InfiniBand and a LID; sim/'s net_ib connects its queue
# pairs by dlid with no GRH, as NCCL does within a subnet) and planes=2 (a dual-port HCA's port 1 and
# port 2, or the two single-port HCAs of a pair, are on two planes that share no switch: a shadow
# pointed at the peer's wrong LID never connects). 4 ranks on 2 nodes run failover_job, which checks
# every element of every call and prints sim/'s completion accounting per rank.
#   run_ha_failover_ib.sh CASE NCCLSIM_RUN FAILOVER_JOB SIMLIB_DIR AUTOHA_SO
# CASE: port  dual-port HCAs, node1/mlx5_3's port 1 down 2 s in under AUTOHA_HA=port: the queue
#             pairs on it fail over to their shadows on port 2 (whose RTR took the peer's port-2
#             LID from the directory), the job completes with correct data and 0 lost, duplicated,
#             reordered or unposted completions on every rank, and NCCL sees no IB error; the same
#             run without HA fails with RETRY_EXC_ERR
#       nic   2 single-port HCAs per node, node1/mlx5_1 down whole (nicdown) under AUTOHA_HA=nic:
#             its queue pairs fail over to shadows on mlx5_0 (the other plane), with the same checks
#       path  AUTOHA_HA=path has no UDP source port to move on IB: each process says so once and
#             builds no shadow; the job still completes (and without a fault nothing fails over)
set -u
case_=$1 run=$2 job=$3 simlib=$4 so=$5
fail() { printf 'FAIL (%s): %s\n--- output ---\n%s\n' "$case_" "$1" "$out"; exit 1; }
export LD_LIBRARY_PATH="$simlib" NCCLSIM_RUN_GRACE_S=2 NCCLSIM_TIMEOUT_S=30 NCCLSIM_VERBS_TIMEOUT_SCALE=0.01
# about 6 ms an iteration on an idle 2-core machine: the job outlives the fault at 2 s
iters=${HA_TEST_ITERS:-1500}
ranks=4
job_run() { # env... : runs the job, sets out, rc, took
  local start; start=$(date +%s)
  out=$(env "$@" timeout 250 "$run" -n "$ranks" --nodes 2 -- "$job" --iters "$iters" 2>&1); rc=$?
  took=$(( $(date +%s) - start ))
}
# NCCL's IB errors, but a port's PORT_ERR (a warning in NCCL) in a process that had nothing on it
ib_errors() { grep "NET/IB" <<<"$out" | grep -v "async event: port error"; }
# every rank's accounting line is there and its counters of wrong completions are 0
accounting_clean() {
  local lines bad
  lines=$(grep -cE "^failover_job: rank [0-9]+ iters $iters " <<<"$out")
  [ "$lines" = "$ranks" ] || fail "expected $ranks accounting lines, saw $lines"
  bad=$(grep -E "^failover_job: rank " <<<"$out" |
    grep -vE " lost 0 duplicated 0 reordered 0 unposted 0 send-duplicated 0 ")
  [ -z "$bad" ] || fail "a rank counted lost, duplicated, reordered or unposted completions: $bad"
}
ib=(NCCLSIM_FABRIC=planes=2)
case $case_ in
port)
  job_run NCCLSIM_TOPO=nic=8x400x2,ib=1 "${ib[@]}" NCCLSIM_FABRIC_FAULTS="at=2s:portdown:node1/mlx5_3:1" \
    AUTOHA_HA=port LD_PRELOAD="$so"
  [ $rc -eq 0 ] || fail "the job failed under AUTOHA_HA=port on InfiniBand (rc $rc)"
  accounting_clean
  ib_errors | grep -q . && fail "NCCL saw an IB error under AUTOHA_HA=port"
  n=$(grep -c "HA: QP [0-9]* (mlx5_3 port 1) failed over to its shadow QP [0-9]* (port 2)" <<<"$out")
  [ "$n" -ge 2 ] || fail "expected failovers of mlx5_3's queue pairs to port 2, saw $n"
  grep -E "failed over" <<<"$out" | grep -qv "(mlx5_3 port 1)" && fail "a queue pair off mlx5_3 port 1 failed over"
  replayed=$(grep -oE "failed over .*: [0-9]+ work requests replayed" <<<"$out" | grep -oE "[0-9]+ work" | awk '{s+=$1} END {print s+0}')
  stall=$(grep -oE "failed over to its shadow QP [0-9]+ \(port 2\) in [0-9.]+ ms" <<<"$out" | grep -oE "[0-9.]+ ms$" | sort -g | tail -1)
  echo "ok: IB port down under AUTOHA_HA=port -> $n failovers to port 2 (longest switch $stall), $replayed work requests replayed, 0 lost/duplicated/reordered completions on $ranks ranks, job completed in $took s"
  job_run NCCLSIM_TOPO=nic=8x400x2,ib=1 "${ib[@]}" NCCLSIM_FABRIC_FAULTS="at=1s:portdown:node1/mlx5_3:1" \
    AUTOHA_HA=off LD_PRELOAD="$so"
  [ $rc -ne 0 ] || fail "the job without HA should fail"
  grep -qE "NET/IB: Got completion from peer .* with status=transport retry counter exceeded\(12\).* hca mlx5_3" <<<"$out" ||
    fail "without HA: no RETRY_EXC_ERR completion on mlx5_3"
  echo "ok: the same IB run without HA fails with RETRY_EXC_ERR in $took s"
  ;;
nic)
  job_run NCCLSIM_TOPO=nic=2x400,ib=1 "${ib[@]}" NCCLSIM_FABRIC_FAULTS="at=2s:nicdown:node1/mlx5_1" \
    AUTOHA_HA=nic LD_PRELOAD="$so"
  [ $rc -eq 0 ] || fail "the job failed under AUTOHA_HA=nic on InfiniBand (rc $rc)"
  accounting_clean
  ib_errors | grep -q . && fail "NCCL saw an IB error under AUTOHA_HA=nic"
  n=$(grep -c "HA: QP [0-9]* (mlx5_1 port 1) failed over to its shadow QP [0-9]* (mlx5_0 port 1)" <<<"$out")
  [ "$n" -ge 2 ] || fail "expected failovers of mlx5_1's queue pairs to shadows on mlx5_0, saw $n"
  grep -E "failed over" <<<"$out" | grep -qv "(mlx5_1 port 1)" && fail "a queue pair off mlx5_1 failed over"
  replayed=$(grep -oE "failed over .*: [0-9]+ work requests replayed" <<<"$out" | grep -oE "[0-9]+ work" | awk '{s+=$1} END {print s+0}')
  echo "ok: IB NIC down under AUTOHA_HA=nic -> $n failovers to mlx5_0, $replayed work requests replayed, 0 lost/duplicated/reordered completions on $ranks ranks, job completed in $took s"
  ;;
path)
  iters=${HA_TEST_ITERS:-50}
  job_run NCCLSIM_TOPO=nic=8x400x2,ib=1 "${ib[@]}" AUTOHA_HA=path AUTOHA_LOG=debug AUTOHA_LOG_SUBSYS=qp LD_PRELOAD="$so"
  [ $rc -eq 0 ] || fail "the job failed under AUTOHA_HA=path on InfiniBand (rc $rc)"
  accounting_clean
  n=$(grep -c "is addressed by LID (InfiniBand, no GRH): AUTOHA_HA=path moves a RoCE queue pair's UDP source port" <<<"$out")
  [ "$n" = "$ranks" ] || fail "expected the message once per process ($ranks), saw $n"
  grep -qE "shadow QP [0-9]+ .*is ready" <<<"$out" && fail "a shadow was built under AUTOHA_HA=path on InfiniBand"
  grep -q "failed over" <<<"$out" && fail "a failover without a fault"
  echo "ok: AUTOHA_HA=path on InfiniBand -> said once per process ($n), no shadow built, job completed"
  ;;
*) echo "unknown case $case_"; exit 2 ;;
esac
