#!/usr/bin/env bash
# The provider's completion accounting (ncclsimNetStats, the stats line at destroy), on 4 ranks
# over 2 nodes through sim/'s verbs provider. Clean: every rank received and sent chunks, each once,
# nothing lost, duplicated, reordered or made up. Then NCCLSIM_NET_INJECT plays a faulty layer
# between NCCL and the NIC: a receive completion taken twice and a send completion for a WR never
# posted, and one carrying a message not sent yet, are counted (the job still completes with
# correct data); a dropped receive completion
# fails the call within NCCLSIM_NET_LOST_MS with an error naming the chunk, instead of hanging.
#   run_net_stats.sh NCCLSIM_RUN NET_STATS_JOB SIMLIB_DIR
set -u
run=$1 job=$2 simlib=$3
fail() { printf 'FAIL: %s\n--- output ---\n%s\n' "$1" "$out"; exit 1; }
export LD_LIBRARY_PATH="$simlib" NCCLSIM_RUN_GRACE_S=2 NCCLSIM_TIMEOUT_S=20 NCCLSIM_TOPO="nic=8x200x2"
field() { grep -oE "^net_stats_job: rank [0-9]+ .*" <<<"$out" | grep -oE "$1 [0-9]+" | awk '{s += $2} END {print s + 0}'; }

out=$(NCCLSIM_NET_STATS=1 timeout 120 "$run" -n 4 --nodes 2 -- "$job" 2>&1) || fail "clean: the job failed"
[ "$(grep -c '^net_stats_job: rank' <<<"$out")" = 4 ] || fail "clean: not every rank printed its counters"
grep -E '^net_stats_job: rank' <<<"$out" | grep -qE ' chunks 0 | sends 0 ' && fail "clean: a rank saw no chunk cross"
for f in lost duplicated reordered unposted send-duplicated; do
  [ "$(field " $f")" = 0 ] || fail "clean: $f is not 0"
done
[ "$(grep -c 'NET/IB stats rank' <<<"$out")" = 4 ] || fail "clean: NCCLSIM_NET_STATS=1 printed no stats line at destroy"
grep -E '^net_stats_job: rank' <<<"$out" | grep -qE 'stall-wall-us 0$' && fail "clean: a rank measured no wait for its completions"

out=$(NCCLSIM_NET_INJECT=ahead=2 timeout 120 "$run" -n 4 --nodes 2 -- "$job" 2>&1) || fail "ahead: the job failed"
[ "$(field ' reordered')" -ge 1 ] || fail "ahead: a completion ahead of its message was not counted as reordered"

out=$(NCCLSIM_NET_INJECT=dup=3 timeout 120 "$run" -n 4 --nodes 2 -- "$job" 2>&1) || fail "dup: the job failed"
[ "$(field ' duplicated')" -ge 1 ] || fail "dup: a receive completion taken twice was not counted"
grep -qE 'NET/IB stats rank .* duplicated [1-9]' <<<"$out" || fail "dup: no stats line at destroy without NCCLSIM_NET_STATS"

out=$(NCCLSIM_NET_INJECT=phantom=2 timeout 120 "$run" -n 4 --nodes 2 -- "$job" 2>&1) || fail "phantom: the job failed"
[ "$(field ' unposted')" -ge 1 ] || fail "phantom: a send completion for a WR never posted was not counted"
[ "$(field ' lost')" = 0 ] || fail "phantom: something was lost"

start=$(date +%s)
out=$(NCCLSIM_NET_LOST_MS=1500 NCCLSIM_NET_INJECT=drop=3 timeout 120 "$run" -n 4 --nodes 2 -- "$job" 2>&1); rc=$?
took=$(( $(date +%s) - start ))
[ $rc -ne 0 ] && [ $rc -ne 124 ] || fail "drop: the job should fail by itself (rc $rc)"
[ "$took" -le 30 ] || fail "drop: the job took $took s to end (bound 30 s)"
grep -qE 'NET/IB: rank [0-9]+ lost a completion: chunk [0-9]+ \([0-9]+ bytes\) received from rank [0-9]+ on channel [0-9]+ QP 0' <<<"$out" ||
  fail "drop: no error naming the lost chunk"
echo "OK"
