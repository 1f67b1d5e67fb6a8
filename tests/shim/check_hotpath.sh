#!/usr/bin/env bash
# The shim's hot path makes no allocation, takes no lock and makes no system call: hotpath_job runs
# one converged iteration (one AllReduce per rank of a 2-rank job, configs fixed by an override,
# after a warm-up past every key's first decisions and timed calls) between markers, once without
# and once with libautoha.so preloaded. Allocations and locks are counted by ahcount (preloaded),
# system calls by strace between getppid() markers; the counts must be equal.
#   check_hotpath.sh HOTPATH_JOB LIBAUTOHA LIBAHCOUNT SIMLIB
set -uo pipefail
job=$1 lib=$2 count=$3 simlib=$4
export LD_LIBRARY_PATH=$simlib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export AUTOHA_MODE=fixed AUTOHA_OVERRIDE="allreduce:algo=ring,proto=ll,nchannels=2" AUTOHA_REPORT=off
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# Warm-up 300 iterations: the window's call index (300) is past the first 16 timed calls of the key
# and not one of the 1-in-64 sampled ones, so it is a plain converged call.
args=(--warmup 300 --iters 1 --window)
run() { # NAME PRELOAD
  LD_PRELOAD=$2 "$job" "${args[@]}" >"$tmp/$1.out" 2>"$tmp/$1.err" || { echo "FAIL: $1 run failed"; cat "$tmp/$1.err"; exit 1; }
  grep '^window' "$tmp/$1.out" || { echo "FAIL: $1: the counting library did not report"; exit 1; }
  strace -f -qq -o "$tmp/$1.strace" env LD_PRELOAD="$2" "$job" "${args[@]}" >/dev/null 2>&1 ||
    { echo "FAIL: $1 run under strace failed"; exit 1; }
  # system calls strictly between the two getppid() markers
  awk '/getppid\(\)/ {n++; next} n == 1 {c++} END {if (n < 2) print "nomarkers"; else print c + 0}' "$tmp/$1.strace" >"$tmp/$1.sys"
  echo "$1: system calls in the window: $(cat "$tmp/$1.sys")"
}
run plain "$count"
run shim "$count:$lib"
grep -q " autoha INFO " <(LD_PRELOAD=$lib AUTOHA_LOG=info "$job" --warmup 1 --iters 1 --window 2>&1) ||
  { echo "FAIL: the shim did not load"; exit 1; }
[ "$(cat "$tmp/plain.sys")" != nomarkers ] || { echo "FAIL: no markers in the strace output"; exit 1; }
a=$(grep '^window' "$tmp/plain.out") b=$(grep '^window' "$tmp/shim.out")
[ "$a" = "$b" ] || { echo "FAIL: allocations/locks differ: without the shim '$a', with it '$b'"; exit 1; }
sa=$(cat "$tmp/plain.sys") sb=$(cat "$tmp/shim.sys")
[ "$sa" = "$sb" ] || { echo "FAIL: system calls differ: $sa without the shim, $sb with it"; diff <(awk '/getppid/{n++;next} n==1' "$tmp/plain.strace" | sed 's/^[0-9]* //') <(awk '/getppid/{n++;next} n==1' "$tmp/shim.strace" | sed 's/^[0-9]* //'); exit 1; }
echo "PASS: one converged call adds no allocation, lock or system call ($b, $sb system calls either way)"
