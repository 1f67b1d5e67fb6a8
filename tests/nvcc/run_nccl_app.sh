#!/usr/bin/env bash
# Runs the nvcc-built program on sim/ twice as 4 processes and twice as 1 process x 4 threads; each
# run must succeed and print the same timings (sorted, since ranks print in any order), and the
# process and thread runs must agree.
set -euo pipefail
app=$1 launcher=$2 simlib=$3
export LD_LIBRARY_PATH=$simlib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
run() { "$@" | sort; }
p1=$(run "$launcher" -n 4 -- "$app")
p2=$(run "$launcher" -n 4 -- "$app")
t1=$(run "$app" --threads 4)
t2=$(run "$app" --threads 4)
echo "processes:"; echo "$p1"; echo "threads:"; echo "$t1"
[ "$(echo "$p1" | grep -c 'ms$')" -eq 4 ] || { echo "FAIL: expected 4 rank lines (processes)"; exit 1; }
[ "$(echo "$t1" | grep -c 'ms$')" -eq 4 ] || { echo "FAIL: expected 4 rank lines (threads)"; exit 1; }
[ "$p1" = "$p2" ] || { echo "FAIL: process-mode timings differ between runs"; exit 1; }
[ "$t1" = "$t2" ] || { echo "FAIL: thread-mode timings differ between runs"; exit 1; }
# One node either way, so the model gives processes and threads the same times.
[ "$p1" = "$t1" ] || { echo "FAIL: processes and threads report different timings"; exit 1; }
echo "PASS: identical timings across runs, and between processes and threads"
