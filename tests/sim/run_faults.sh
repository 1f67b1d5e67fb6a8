#!/usr/bin/env bash
# sim/'s injected faults on a 4-rank train_job under ncclsim-run — what autoha's diagnosis is
# tested against: a collective that never completes on one rank (NCCLSIM_FAULT=hang), a rank that
# stops before a call (train_job --stall), ranks that issue different collectives (train_job
# --mismatch: an error on every rank by default, a hang with NCCLSIM_MISMATCH=hang, as real NCCL),
# a rank whose compute is slow (NCCLSIM_FAULT=slow, from the start or from its N-th collective),
# and a malformed fault named and ignored.
#   run_faults.sh NCCLSIM_RUN TRAIN_JOB
set -u
run=$1 job=$2
fail() { printf 'FAIL: %s\n--- output ---\n%s\n' "$1" "$out"; exit 1; }
export NCCLSIM_RUN_GRACE_S=2 NCCLSIM_TIMEOUT_S=3
# 3 s for the cases that wait out the timeout; the jobs that must complete get 60 s below (on a
# machine at load 40 a clean job's rank waited 3 s for its peers and failed)
# 4 layers: each iteration issues #0-3 all-gathers, #4-7 reduce-scatters, #8-9 all-reduces

out=$(NCCLSIM_FAULT=hang:rank=1:call=5 timeout 60 "$run" -n 4 -- "$job" --iters 4 2>&1); rc=$?
[ $rc -ne 0 ] && [ $rc -ne 124 ] || fail "hang: the job should fail by itself (rc $rc)"
grep -q "rank 1 of communicator [0-9a-f]* never completes collective #5 (NCCLSIM_FAULT)" <<<"$out" ||
  fail "hang: rank 1 does not say it hangs in #5"
# each other rank fails #6: by its own timeout, or — on a loaded machine, where one rank gives up
# first and exits — because that rank is gone (as for the stall below); at least one waited it out
n=$(grep -cE "rank [023]: ncclReduceScatter.*(waited 3 s for its peers|rank [023] \(pid [0-9]+\) of communicator [0-9a-f]+ exited)" <<<"$out")
[ "$n" = 3 ] || fail "hang: $n of the 3 other ranks failed #6 waiting for rank 1"
grep -qE "rank [023]: ncclReduceScatter.*waited 3 s for its peers" <<<"$out" || fail "hang: no rank waited out NCCLSIM_TIMEOUT_S"
# rank 1's calls return (a hung kernel does not block its host); its final sync never does
grep -q "1 rank(s) still running 2 s after a rank failed" <<<"$out" || fail "hang: rank 1 did not block at its sync"

out=$(timeout 60 "$run" -n 4 -- "$job" --iters 4 --stall 2:7 2>&1); rc=$?
[ $rc -ne 0 ] && [ $rc -ne 124 ] || fail "stall: the job should fail by itself (rc $rc)"
grep -q "rank 2 stalls before collective #7" <<<"$out" || fail "stall: rank 2 does not say it stalls"
# each other rank fails #7: by its own timeout, or — on a loaded machine, where one rank gives up
# first and exits — because that rank is gone; at least one waited out the timeout
n=$(grep -cE "rank [013]: ncclReduceScatter.*(waited 3 s for its peers|rank [013] \(pid [0-9]+\) of communicator [0-9a-f]+ exited)" <<<"$out")
[ "$n" = 3 ] || fail "stall: $n of the 3 other ranks failed #7 waiting for rank 2"
grep -qE "rank [013]: ncclReduceScatter.*waited 3 s for its peers" <<<"$out" || fail "stall: no rank waited out NCCLSIM_TIMEOUT_S"

out=$(timeout 60 "$run" -n 4 -- "$job" --iters 4 --mismatch 3:6 2>&1); rc=$?
[ $rc = 1 ] || fail "mismatch: every rank should fail the call (rc $rc)"
n=$(grep -c "ranks disagree on the collective of communicator [0-9a-f]*, call #6" <<<"$out")
[ "$n" = 4 ] || fail "mismatch: $n of 4 ranks failed #6 naming the disagreement"

out=$(NCCLSIM_MISMATCH=hang timeout 8 "$run" -n 4 -- "$job" --iters 4 --mismatch 3:6 2>&1); rc=$?
[ $rc = 124 ] || fail "mismatch=hang: the job should hang until killed (rc $rc)"
n=$(grep -c "call #6 .*blocks here (NCCLSIM_MISMATCH=hang)" <<<"$out")
[ "$n" = 4 ] || fail "mismatch=hang: $n of 4 ranks say they block in #6"

export NCCLSIM_TIMEOUT_S=60
ms() { sed -n 's/.*iterations: \([0-9.]*\) ms per iteration.*/\1/p' <<<"$1"; }
out=$("$run" -n 4 -- "$job" --iters 8 2>&1) || fail "slow: the clean job failed"
clean=$(ms "$out")
out=$(NCCLSIM_FAULT=slow:rank=2:pct=50 "$run" -n 4 -- "$job" --iters 8 2>&1) || fail "slow: the job failed"
slow=$(ms "$out")
awk -v c="$clean" -v s="$slow" 'BEGIN { exit !(c > 0 && s > 1.2 * c) }' ||
  fail "slow: one rank computing 50% slower should slow the iteration (${clean} -> ${slow} ms)"
# from its collective #50 on (iteration 5 of 8; iterations 2-7 are timed): slower than the clean
# job, faster than the one slow throughout, and it says when it starts
out=$(NCCLSIM_FAULT=slow:rank=2:pct=50:after=50 "$run" -n 4 -- "$job" --iters 8 2>&1) ||
  fail "slow after: the job failed"
late=$(ms "$out")
awk -v c="$clean" -v l="$late" -v s="$slow" 'BEGIN { exit !(l > 1.05 * c && l < 0.95 * s) }' ||
  fail "slow after: iterations ${clean} (clean), ${late} (slow from #50), ${slow} (slow) ms"
grep -q "ncclsim: fault: rank 2 computes 50% slower from its collective #50 on" <<<"$out" ||
  fail "slow after: rank 2 does not say when it turns slow"

# NCCLSIM_NOISE jitters each rank's compute: the iteration changes, and the same seed repeats it
out=$(NCCLSIM_NOISE=0.05 "$run" -n 4 -- "$job" --iters 8 2>&1) || fail "noise: the job failed"
noisy=$(ms "$out")
out=$(NCCLSIM_NOISE=0.05 "$run" -n 4 -- "$job" --iters 8 2>&1) || fail "noise: the job failed"
[ "$(ms "$out")" = "$noisy" ] || fail "noise: the same seed gave $noisy and $(ms "$out") ms"
[ "$noisy" != "$clean" ] || fail "noise: NCCLSIM_NOISE=0.05 left the iteration at $clean ms"

# a late host (--host-delay) slows every rank's iteration only where idle streams follow the host
# (small buffers: the copies' real time, long on a loaded machine, would show on the host clock too)
small=(--iters 8 --layers 1 --layer-kib 64 --bucket-kib 256)
out=$(NCCLSIM_HOST_CLOCK=1 "$run" -n 2 -- "$job" "${small[@]}" 2>&1) || fail "host clock: the job failed"
hc_clean=$(ms "$out")
out=$(NCCLSIM_HOST_CLOCK=1 "$run" -n 2 -- "$job" "${small[@]}" --host-delay 1:100000 2>&1) ||
  fail "host clock: the delayed job failed"
hc_late=$(ms "$out")
awk -v c="$hc_clean" -v s="$hc_late" 'BEGIN { exit !(s >= c + 80) }' ||
  fail "host clock: a host 100 ms late per iteration should add ~100 ms (${hc_clean} -> ${hc_late} ms)"
out=$("$run" -n 2 -- "$job" "${small[@]}" --host-delay 1:100000 2>&1) || fail "no host clock: the job failed"
vt_late=$(ms "$out")
out=$("$run" -n 2 -- "$job" "${small[@]}" 2>&1) || fail "no host clock: the clean job failed"
[ "$(ms "$out")" = "$vt_late" ] || fail "no host clock: a late host should change nothing ($(ms "$out") vs $vt_late ms)"

out=$(NCCLSIM_FAULT='hang:rank=1,slow:rank=0:pct=50' "$run" -n 2 -- "$job" --iters 4 2>&1) ||
  fail "bad entry: the job should run"
grep -q "invalid entry in NCCLSIM_FAULT: 'hang:rank=1' (expected" <<<"$out" || fail "bad entry: not named"
echo "faults: hang, stall, mismatch (fail, hang), slow (${clean} -> ${slow} ms per iteration; ${late} from #50), host delay" \
  "(${hc_clean} -> ${hc_late} ms with NCCLSIM_HOST_CLOCK=1), bad entry: ok (sim/)"
