#!/usr/bin/env bash
# Transparent failover in the shapes real programs drive NCCL in, not only one rank per process
# issuing calls one by one: port 1 of node1/mlx5_3 (dual-port NICs, bond=0) goes down 2 s into a
# 2-node job under AUTOHA_HA=port; the job must complete with every result checked, without NCCL
# seeing an IB error, after failovers of mlx5_3's queue pairs.
#   run_ha_shapes.sh CASE NCCLSIM_RUN JOB SIMLIB_DIR AUTOHA_SO
# CASE: threads  JOB is tests/shim's multi_gpu_job: one thread drives 4 ranks per process (grouped
#                calls, as nccl-tests -g 4 and JAX do), 2 processes; its data equals a plain run's
#       graph    JOB is bench/failover's failover_job --graph: 8 ranks, AllReduce and AllGather
#                captured in a CUDA graph once and replayed every iteration (as frameworks capture
#                their step); the provider's counters show no lost, duplicated or reordered
#                completion on any rank
# Every HA line names ranks, never "[-]": a line about one queue pair names the rank whose queue
# pair it is ("[N]": its device's rank, whichever thread writes it), a line about the process (a
# port down) the ranks of its process ("[0-3]"/"[4-7]" for threads); every failover line "[N]".
set -u
case_=$1 run=$2 job=$3 simlib=$4 so=$5
fail() { printf 'FAIL (%s): %s\n--- output ---\n%s\n' "$case_" "$1" "$(tail -40 <<<"$out")"; exit 1; }
export LD_LIBRARY_PATH="$simlib" NCCLSIM_RUN_GRACE_S=2 NCCLSIM_TIMEOUT_S=30 NCCLSIM_VERBS_TIMEOUT_SCALE=0.01
export NCCLSIM_TOPO=nic=8x400x2 NCCLSIM_FABRIC=bond=0
fault=(NCCLSIM_FABRIC_FAULTS="at=2s:portdown:node1/mlx5_3:1" AUTOHA_HA=port LD_PRELOAD="$so")
case $case_ in
threads) procs=2 args=(--gpus 4 --iters "${HA_TEST_ITERS:-600}") ;;
graph) procs=8 args=(--graph --iters "${HA_TEST_ITERS:-400}") ;;
*) echo "unknown case $case_"; exit 2 ;;
esac
out=$(timeout 250 "$run" -n "$procs" --nodes 2 -- "$job" "${args[@]}" 2>&1) || fail "the plain run failed"
plain=$(grep '^checksum' <<<"$out" | sort)
start=$(date +%s)
out=$(env "${fault[@]}" timeout 250 "$run" -n "$procs" --nodes 2 -- "$job" "${args[@]}" 2>&1); rc=$?
took=$(( $(date +%s) - start ))
[ $rc -eq 0 ] || fail "the job failed under AUTOHA_HA=port (rc $rc)"
# (a PORT_ERR is only a warning in NCCL: the processes without queue pairs on the port get it)
grep "NET/IB" <<<"$out" | grep -v "async event: port error" | grep -q . && fail "the job completed, but NCCL saw an IB error"
n=$(grep -c "HA: QP [0-9]* (mlx5_3 port 1) failed over to its shadow QP [0-9]* (port 2)" <<<"$out")
[ "$n" -ge 2 ] || fail "expected failovers of mlx5_3's queue pairs, saw $n (did the job end before the fault?)"
ha_lines=$(grep -E ' autoha [A-Z]+ [a-z]+: HA: ' <<<"$out")
case $case_ in
threads) ranked=' \[(0-3|4-7|[0-7])\] autoha ' ;;
graph) ranked=' \[[0-7]\] autoha ' ;;
esac
unranked=$(grep -vE "$ranked" <<<"$ha_lines")
[ -z "$unranked" ] || fail "HA lines without their ranks: $(head -3 <<<"$unranked")"
fo_unranked=$(grep "failed over to its shadow QP" <<<"$ha_lines" | grep -vE ' \[[0-7]\] autoha ')
[ -z "$fo_unranked" ] || fail "failover lines not naming their queue pair's rank: $(head -3 <<<"$fo_unranked")"
case $case_ in
threads)
  [ "$(grep '^checksum' <<<"$out" | sort)" = "$plain" ] && [ -n "$plain" ] ||
    fail "the data differ from the plain run's"
  ;;
graph)
  ok=$(grep -cE "^failover_job: rank [0-9]+ .* lost 0 duplicated 0 reordered 0 unposted 0 send-duplicated 0 " <<<"$out")
  [ "$ok" = 8 ] || fail "$ok of 8 ranks report clean completion accounting"
  ;;
esac
echo "ok: $case_: $n failovers of mlx5_3's queue pairs, every result checked, job completed in $took s;" \
  "$(grep -c . <<<"$ha_lines") HA lines, each naming its process's ranks"
