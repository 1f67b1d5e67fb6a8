#!/usr/bin/env bash
# bench/diagnosis: straggler detection on sim/ over 20 seeds, libautoha.so preloaded in observe
# mode, NCCLSIM_NOISE=0.02 (every rank's compute and every collective jittered, reproducibly per
# NCCLSIM_SEED).
# - Detection: 64 ranks on 8 nodes, one rank (a different one per seed) computing 10% slower; the
#   iteration at which the hub named it (from the call in its finding: 4 all-gathers and 4
#   reduce-scatters per iteration), and whether it named that rank and no other.
# - False findings: 16 ranks on 2 nodes, no fault, 500 iterations of 10 collectives: 5,000 calls
#   of the communicator per seed, 10^5 in all; every straggler finding is a false one.
# Bar: all 20 slowed ranks named within 50 iterations, no other rank named, 0 false findings.
#   run_diagnosis.sh NCCLSIM_RUN TRAIN_JOB LIBAUTOHA SIMLIB_DIR
set -u
# A single-host job: its hub listens on loopback unless the caller named an interface.
export AUTOHA_COORD_IFNAME=${AUTOHA_COORD_IFNAME:-lo}
run=$1 job=$2 lib=$3 simlib=$4
seeds=${DIAG_SEEDS:-20}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
export AUTOHA_REPORT="$work/reports/%h-%p.json" NCCLSIM_NOISE=0.02 NCCLSIM_TIMEOUT_S=300
shape=(--layer-kib 256 --bucket-kib 1024)
delays=() missed=0 wrong=0 false_findings=0 calls=0

for s in $(seq 1 "$seeds"); do
  slow=$(( (s * 37) % 64 ))
  log=$work/slow-$s.log
  NCCLSIM_SEED=$s NCCLSIM_FAULT=slow:rank=$slow:pct=10 LD_LIBRARY_PATH="$simlib" LD_PRELOAD="$lib" \
    "$run" -n 64 --nodes 8 -- "$job" --iters 60 "${shape[@]}" >"$log" 2>&1 ||
    { echo "diagnosis: seed $s: the slowed job failed"; tail -3 "$log"; missed=$((missed + 1)); continue; }
  line=$(grep -m1 -E "WARN [a-z]+: straggler on comm" "$log")
  if ! grep -qE "rank $slow \(" <<<"$line"; then
    echo "diagnosis: seed $s: rank $slow was not named first: ${line:-nothing named}"
    missed=$((missed + 1))
    continue
  fi
  others=$(grep -E "WARN [a-z]+: straggler on comm" "$log" | grep -vc "rank $slow (")
  [ "$others" = 0 ] || { echo "diagnosis: seed $s: other ranks named too"; wrong=$((wrong + 1)); }
  set -- $(sed -E 's/.*up to ([a-z]+) [^ ]+ #([0-9]+).*/\1 \2/' <<<"$line")
  per=1
  case $1 in allgather | reducescatter) per=4 ;; esac
  delays+=($(($2 / per)))
done

for s in $(seq 1 "$seeds"); do
  log=$work/clean-$s.log
  NCCLSIM_SEED=$s LD_LIBRARY_PATH="$simlib" LD_PRELOAD="$lib" \
    "$run" -n 16 --nodes 2 -- "$job" --iters 500 "${shape[@]}" >"$log" 2>&1 ||
    { echo "diagnosis: seed $s: the clean job failed"; tail -3 "$log"; false_findings=$((false_findings + 1)); continue; }
  calls=$((calls + 500 * 10))
  # each finding is logged by all 16 processes: count them once
  n=$(grep -E "WARN [a-z]+: straggler on comm" "$log" | sed -E "s/^.* autoha WARN [a-z]+: //" | sort -u | wc -l)
  [ "$n" = 0 ] || { echo "diagnosis: seed $s: false finding:"; grep -m1 -E "WARN [a-z]+: straggler" "$log"; }
  false_findings=$((false_findings + n))
done

sorted=$(printf '%s\n' "${delays[@]}" | sort -n)
nd=${#delays[@]}
med=$(sed -n "$(( (nd + 1) / 2 ))p" <<<"$sorted")
max=$(tail -1 <<<"$sorted")
ok=1
[ "$missed" = 0 ] && [ "$wrong" = 0 ] && [ "$false_findings" = 0 ] && [ "${max:-999}" -lt 50 ] || ok=0
echo "diagnosis (sim/, NCCLSIM_NOISE=0.02, $seeds seeds): slowed rank of 64 named in $nd of $seeds" \
  "jobs, at iteration ${med:-?} (median), ${max:-?} (max; bar 50), others named in $wrong;" \
  "false findings $false_findings over $calls collective calls of clean jobs (bar 0):" \
  "$([ $ok = 1 ] && echo OK || echo FAILED)"
[ $ok = 1 ]
